package amqp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

// TestStopReturnsEachMessageOnce: a router with many subscriptions of one
// quorum queue, stopped under a backlog, returns each message it held to
// the queue once. A router stops in one of two ways: Router.Close closes
// the subscriber while handlers still hold messages, and the end of Run's
// context ends every subscription's context at once (the bus then closes
// the transport). If a subscription returns its messages while another of
// the process still consumes, the broker hands them to that one, which
// returns them again when it stops: the returns pile onto the head of the
// queue (delivery counts of 5 to 24 after one stop with 32
// subscriptions), and past the queue's delivery limit RabbitMQ drops a
// message without a trace.
//
// Whether a stop returns anything at all is a race (a subscription returns
// the delivery the broker sent after its last ack, if it came before the
// stop), so each way of stopping is tried until a stop returned messages,
// five times at most, every try checked (a single try may return
// nothing).
//
// It runs with 32 subscriptions holding one message each, and with one
// subscription holding 32 (as the bus subscribes a handler of concurrency
// 32: its messages in flight on one channel).
func TestStopReturnsEachMessageOnce(t *testing.T) {
	for _, shape := range []struct {
		name                    string
		subscriptions, inFlight int
	}{{"32 subscriptions of 1", 32, 1}, {"1 subscription of 32", 1, 32}} {
		for _, stop := range []string{"router closed", "context ended"} {
			t.Run(shape.name+"/"+stop, func(t *testing.T) {
				for range 5 {
					if stopReturnsEachMessageOnce(t, shape.subscriptions, shape.inFlight, stop == "context ended") > 0 {
						return
					}
				}
				t.Fatal("in five stops under load, none returned a message: the check could not look")
			})
		}
	}
}

// stopReturnsEachMessageOnce stops a router under a backlog, checks that
// no message was returned more than once, and returns how many were
// returned once.
func stopReturnsEachMessageOnce(t *testing.T, subscriptions, inFlight int, byContext bool) int {
	const backlog = 2000
	topic := testenv.Name("stop_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum})
	sub, err := tr.Subscriber("g", inFlight)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	msgs := make([]*message.Message, backlog)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), nil)
	}
	require.NoError(t, tr.Publisher().Publish(topic, msgs...))

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	handled := make(chan struct{}, backlog)
	for i := range subscriptions {
		router.AddConsumerHandler("h"+strconv.Itoa(i), topic, sub, func(*message.Message) error {
			time.Sleep(100 * time.Millisecond)
			handled <- struct{}{}
			return nil
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- router.Run(ctx) }()
	<-router.Running()
	for range 2 * subscriptions * inFlight { // every subscription busy, the queue still full
		<-handled
	}
	if byContext {
		cancel() // as a bus whose Run context ends: every subscription's context ends
		time.Sleep(500 * time.Millisecond)
	}
	require.NoError(t, router.Close())
	require.NoError(t, <-runDone)
	require.NoError(t, sub.Close())

	counts := deliveryCounts(t, a, amqp.QueueName(topic, "g"))
	returned := counts[1]
	delete(counts, 0)
	delete(counts, 1)
	require.Empty(t, counts, "messages by how often they had been returned (%d once): one stop returned some more than once", returned)
	return returned
}

// deliveryCounts reads every message of the quorum queue and counts
// them by x-delivery-count: how often RabbitMQ had them returned. It
// returns them to the queue when it ends, which counts as one more return
// of each: call it once.
func deliveryCounts(t *testing.T, a *admin, queue string) map[int64]int {
	t.Helper()
	ch, err := a.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	counts := map[int64]int{}
	for {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			return counts
		}
		n, _ := d.Headers["x-delivery-count"].(int64)
		counts[n]++
	}
}

package amqp_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// TestPublishMandatoryNoQueue: a command to a topic no queue is bound to
// fails with ErrNoRoute naming the topic, while a plain Publish (an event
// nobody subscribes to) does not fail.
func TestPublishMandatoryNoQueue(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("noroute_")
	newAdmin(t).cleanup(topic)
	tr := newTransport(t, amqp.Config{})

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	err := tr.PublishMandatory(topic, msg)
	require.ErrorIs(t, err, transport.ErrNoRoute)
	require.ErrorContains(t, err, topic)
	require.ErrorContains(t, err, msg.UUID)

	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
}

// TestPublishMandatoryBound: with a queue bound, PublishMandatory succeeds
// and the messages arrive; in a batch, only the unroutable topic fails.
func TestPublishMandatoryBound(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("routed_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	tr := newTransport(t, amqp.Config{})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	got := consume(t, sub, topic, nil)

	var msgs []*message.Message
	for i := range 150 { // more than one internal batch
		msgs = append(msgs, message.NewMessage(fmt.Sprintf("m-%03d", i), []byte(`{}`)))
	}
	require.NoError(t, tr.PublishMandatory(topic, msgs...))
	require.Eventually(t, func() bool { return len(got.all()) == len(msgs) }, 10*time.Second, 20*time.Millisecond)
	for i, m := range got.all() {
		require.Equal(t, msgs[i].UUID, m.UUID)
	}
}

// TestPublishMandatoryConcurrent: concurrent calls to routed and unrouted
// topics each get their own answer (returns are told apart by message ID
// and publishes do not interleave on the channel).
func TestPublishMandatoryConcurrent(t *testing.T) {
	t.Parallel()
	routed, unrouted := testenv.Name("routed_"), testenv.Name("noroute_")
	a := newAdmin(t)
	a.cleanup(routed, "g")
	a.cleanup(unrouted)
	tr := newTransport(t, amqp.Config{})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(routed))

	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			topic := routed
			if i%2 == 1 {
				topic = unrouted
			}
			errs[i] = tr.PublishMandatory(topic,
				message.NewMessage(watermill.NewUUID(), nil), message.NewMessage(watermill.NewUUID(), nil))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 1 {
			require.ErrorIs(t, err, transport.ErrNoRoute, i)
			require.ErrorContains(t, err, unrouted, i)
		} else {
			require.NoError(t, err, i)
		}
	}
}

// TestPublishMandatoryAfterClose fails plainly instead of reconnecting.
func TestPublishMandatoryAfterClose(t *testing.T) {
	t.Parallel()
	tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(t)})
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	err = tr.PublishMandatory("any", message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorContains(t, err, "closed")
	require.NotErrorIs(t, err, transport.ErrNoRoute)
}

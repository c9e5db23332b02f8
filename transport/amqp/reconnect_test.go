package amqp_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

// TestReconnectAfterTheConnectionDrops: the subscriber's connection drops
// (a proxy between it and the broker closes every connection) while a
// handler holds a message; its ack goes to the dead channel, and after the
// reconnect every message is consumed, the held one again. The bus's
// TestBrokerConnectionsClosedMidRun does the same across processes with
// rabbitmqctl, which disturbs every test on the broker; this one touches
// only its own connection.
func TestReconnectAfterTheConnectionDrops(t *testing.T) {
	t.Parallel()
	p, sub, topic := proxiedSubscriber(t, 50)
	var seen sync.Map
	var distinct atomic.Int64
	held, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		out, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		go func() {
			for m := range out {
				holding := false
				first.Do(func() { holding = true })
				if holding {
					close(held)
					<-release
				}
				if _, dup := seen.LoadOrStore(m.UUID, true); !dup {
					distinct.Add(1)
				}
				m.Ack()
			}
		}()
	}
	<-held
	p.Drop()
	time.Sleep(300 * time.Millisecond)
	close(release) // acked on the dead channel
	require.Eventually(t, func() bool { return distinct.Load() == 50 }, 20*time.Second, 20*time.Millisecond,
		"every message consumed after the reconnect")
	require.NoError(t, sub.Close())
}

// TestCloseInterruptsARedial: Close returns at once while the subscriber
// is redialling a broker that takes the TCP connection and never answers.
// With amqp091.Dial's own timeout it would take about 30 s.
func TestCloseInterruptsARedial(t *testing.T) {
	t.Parallel()
	p, sub, topic := proxiedSubscriber(t, 1)
	out, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	go func() {
		for m := range out {
			m.Ack()
		}
	}()
	p.Blackhole(true)
	p.Drop()
	time.Sleep(time.Second) // the redial is waiting for the handshake now
	start := time.Now()
	require.NoError(t, sub.Close())
	require.Less(t, time.Since(start), 5*time.Second, "Close waited for the redial")
}

// TestCloseBoundedOnASilentBroker: Close returns within its bound when the
// broker stops answering without closing the connection (a half-open TCP
// connection: the proxy holds every byte). The consumers' cancel and the
// connection's close would wait for the heartbeat to give up, about 30 s.
func TestCloseBoundedOnASilentBroker(t *testing.T) {
	t.Parallel()
	p, sub, topic := proxiedSubscriber(t, 3)
	out, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	got := make(chan struct{}, 3)
	go func() {
		for m := range out {
			m.Ack()
			got <- struct{}{}
		}
	}()
	<-got
	p.Freeze(true)
	start := time.Now()
	require.NoError(t, sub.Close())
	t.Logf("Close took %v", time.Since(start))
	require.Less(t, time.Since(start), 10*time.Second, "Close waited for the silent broker")
	p.Drop() // the broker's side of the connection goes now, so the cleanup finds the queue unused
}

// proxiedSubscriber returns a subscriber of group g connected through a
// proxy, and a topic with n messages in the group's queue.
func proxiedSubscriber(t *testing.T, n int) (*amqptest.Proxy, message.Subscriber, string) {
	t.Helper()
	p, proxied := amqptest.NewProxy(t)
	topic := testenv.Name("reconnect_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	direct := newTransport(t, amqp.Config{})
	tr, err := amqp.New(amqp.Config{URL: proxied})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), nil)
	}
	require.NoError(t, direct.Publisher().Publish(topic, msgs...))
	return p, sub, topic
}

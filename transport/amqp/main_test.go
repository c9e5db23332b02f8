package amqp_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTransport returns a transport on the test broker, closed at the end;
// then what it declared is deleted.
func newTransport(t *testing.T, cfg amqp.Config) *amqp.Transport {
	t.Helper()
	return amqptest.New(t, cfg)
}

// admin opens a plain amqp091 connection (a foreign client).
type admin struct {
	t    *testing.T
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

func newAdmin(t *testing.T) *admin {
	t.Helper()
	conn, err := amqp091.Dial(testenv.RequireAMQP(t))
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &admin{t: t, conn: conn, ch: ch}
}

// cleanup deletes a topic's exchange and its queues for the groups when
// the test ends: what the admin declares, or a transport declares before
// the test fails.
func (a *admin) cleanup(topic string, groups ...string) {
	amqptest.DeleteTopic(a.t, topic, groups...)
}

// publish publishes p to the topic's exchange as a foreign producer,
// declaring the exchange as the transport does, and waits for the confirm.
func (a *admin) publish(topic string, p amqp091.Publishing) {
	a.t.Helper()
	ch, err := a.conn.Channel()
	require.NoError(a.t, err)
	defer ch.Close()
	require.NoError(a.t, ch.Confirm(false))
	require.NoError(a.t, ch.ExchangeDeclare(amqp.ExchangeName(topic), "fanout", true, false, false, false, nil))
	c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), amqp.ExchangeName(topic), "", false, false, p)
	require.NoError(a.t, err)
	require.True(a.t, c.Wait(), "broker nacked the publish")
}

// received collects what a subscription delivers.
type received struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (r *received) all() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// consume subscribes to topic and acks (or, when nack says so, nacks)
// every message, until the test ends.
func consume(t *testing.T, sub message.Subscriber, topic string, nack func(*message.Message) bool) *received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	r := &received{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			r.mu.Lock()
			r.msgs = append(r.msgs, msg)
			r.mu.Unlock()
			if nack != nil && nack(msg) {
				msg.Nack()
			} else {
				msg.Ack()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		<-done
	})
	return r
}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// find returns the records at level whose message is msg.
func (r *recorder) find(level slog.Level, msg string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.records {
		if rec.Level == level && rec.Message == msg {
			out = append(out, rec)
		}
	}
	return out
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// settle waits for a redelivery loop to show: long enough for thousands of
// redeliveries of a message nacked with requeue.
const settle = 2 * time.Second

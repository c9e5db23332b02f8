package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/dialect/sqlite"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestADelayedMessageTheBrokerRefusesHoldsNothingBack: three delayed
// commands fall due together and the broker refuses the middle one every
// time (as a message over its size limit). The first is delivered once,
// the third is delivered, and the refused one goes to the error topic
// after a few attempts. A refusal that rolls back the whole batch sends
// the first again at every tick and the third never.
func TestADelayedMessageTheBrokerRefusesHoldsNothingBack(t *testing.T) {
	tr := refusingOne{Transport: gochannel.New(gochannel.Config{}), id: "poison", errorTopic: "error"}
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, DB: testenv.SQLite(t),
		DelayedPollInterval: 20 * time.Millisecond, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	var mu sync.Mutex
	got := map[string]int{}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
		mu.Lock()
		got[bus.MessageID(ctx)]++
		mu.Unlock()
		return nil
	}))
	ep := start(t, b, "error")
	due := time.Now().Add(100 * time.Millisecond)
	for _, id := range []string{"first", "poison", "third"} {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: id}, bus.DeliverAt(due), bus.WithMessageID(id)))
	}
	select {
	case failed := <-ep.errors:
		require.Equal(t, "poison", failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "refused")
	case <-time.After(20 * time.Second):
		t.Fatal("the refused message did not reach the error topic")
	}
	waitFor(t, "the third message", func() bool { mu.Lock(); defer mu.Unlock(); return got["third"] == 1 })
	time.Sleep(200 * time.Millisecond) // ten more ticks of the relay
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"first": 1, "third": 1}, got)
}

// refusingOne refuses every publish of the message id, except to the error topic.
type refusingOne struct {
	transport.Transport
	id, errorTopic string
}

func (t refusingOne) Publisher() message.Publisher {
	return refusingOnePublisher{t.Transport.Publisher(), t}
}

type refusingOnePublisher struct {
	message.Publisher
	t refusingOne
}

func (p refusingOnePublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.t.id && topic != p.t.errorTopic {
			return errors.New("broker refused the message: over its size limit")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestDelayedDeliveriesArePublishedByTheirSender: two services share one
// database, each with its own transport (here each its own in-memory
// one; in production two brokers, or two vhosts). Alpha's delayed
// commands and events reach alpha, whichever bus polls first. Published
// by beta's relay on beta's transport, the commands would go to beta's
// error topic ("no queue takes it") and the events be dropped as unrouted
// without a log line. A row of an older version, which names no sender, is
// still published.
func TestDelayedDeliveriesArePublishedByTheirSender(t *testing.T) {
	db := testenv.Postgres(t)
	newBus := func(endpoint string, poll time.Duration) *bus.Bus {
		b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: gochannel.New(gochannel.Config{}), DB: db,
			Logger: testenv.Logger(t), DelayedPollInterval: poll})
		require.NoError(t, err)
		return b
	}
	// Beta polls 25 times as often, so it reads nearly every row first.
	alpha, beta := newBus(testenv.Name("alpha"), 500*time.Millisecond), newBus(testenv.Name("beta"), 20*time.Millisecond)
	var commands, events atomic.Int64
	require.NoError(t, bus.Handle(alpha, func(context.Context, *CreateInvoice) error { commands.Add(1); return nil }))
	require.NoError(t, bus.Handle(alpha, func(context.Context, *OrderPlaced) error { events.Add(1); return nil }))
	require.NoError(t, bus.Handle(beta, func(context.Context, *CustomerMoved) error { return nil }))
	run(t, alpha)
	run(t, beta)
	ctx := context.Background()
	const n = 20
	for range n {
		require.NoError(t, bus.Send(ctx, alpha, &CreateInvoice{}, bus.To(alpha.Endpoint()), bus.DeliverAfter(200*time.Millisecond)))
		require.NoError(t, bus.Publish(ctx, alpha, &OrderPlaced{OrderID: "x"}, bus.DeliverAfter(200*time.Millisecond)))
	}
	waitFor(t, "every delayed message at alpha", func() bool { return commands.Load() == n && events.Load() == n })
	require.EqualValues(t, 0, beta.Counters().Get("sales.OrderPlaced", metrics.Unrouted), "beta published none of alpha's events")
	require.EqualValues(t, 0, beta.Counters().Total(metrics.Failed), "nor sent alpha's commands to its error topic")

	// A row written before delayed deliveries named their sender.
	require.NoError(t, bus.Send(ctx, alpha, &CreateInvoice{}, bus.To(alpha.Endpoint()), bus.DeliverAfter(time.Hour)))
	require.NoError(t, db.Exec("UPDATE postroom_delayed SET target_group = '', due_at = ?", time.Now().Add(-time.Second).UTC()).Error)
	waitFor(t, "the older row", func() bool {
		var left int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed").Scan(&left).Error)
		return left == 0
	})
}

// TestADelayedRetryThatFailsAgainBecomesTheNext: a delayed retry whose
// handler fails again turns its own row into the next retry, in one
// statement under its lease, so that a crash cannot leave both rows.
// With the next retry as a new row and the claimed one deleted after it,
// a process killed in between runs the message's remaining retries twice.
// The next retry is due after its own delay, not the first one's again (a
// mutation that waits delays[0] before every delayed retry fails here).
func TestADelayedRetryThatFailsAgainBecomesTheNext(t *testing.T) {
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: testenv.Logger(t), DelayedPollInterval: 20 * time.Millisecond,
		Retry: bus.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Millisecond}})
	require.NoError(t, err)
	var attempts atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error {
		attempts.Add(1)
		return errors.New("fails")
	}, bus.WithDelayedRetries(300*time.Millisecond, time.Hour)))
	run(t, b)
	require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{}, bus.To(b.Endpoint())))
	type row struct {
		ID       int64
		DueAt    string // SQLite's text
		Metadata string
	}
	rows := func() []row {
		var rs []row
		require.NoError(t, db.Raw("SELECT id, due_at, metadata FROM postroom_delayed").Scan(&rs).Error)
		return rs
	}
	waitFor(t, "the first delayed retry", func() bool { return len(rows()) == 1 })
	first := rows()[0]
	require.Contains(t, first.Metadata, `"postroom-delayed-retries":"1"`)
	var second row
	waitFor(t, "the second delayed retry scheduled", func() bool {
		rs := rows()
		if len(rs) == 1 && strings.Contains(rs[0].Metadata, `"postroom-delayed-retries":"2"`) {
			second = rs[0]
			return true
		}
		return false
	})
	require.Equal(t, first.ID, second.ID, "the same row, rescheduled in place")
	due, err := sqlite.Dialect{}.ParseTime(second.DueAt)
	require.NoError(t, err)
	require.False(t, due.Before(time.Now().Add(59*time.Minute)),
		"the second delayed retry waits its own delay (1 h), not the first's: due at %s", due)
	require.EqualValues(t, 4, attempts.Load(), "two attempts, then two in the first delayed retry")
}

// TestADelayedMessageIsNotMovedAsideForAnUnreachableBroker: the broker
// cannot be reached for more attempts of a due delayed message than the
// relay allows a refusal (maxDelayedAttempts), yet takes the error topic's
// copy at once (a heal landing between the two, or a flapping broker). The
// message is delivered, not moved aside: an attempt that reached no broker
// says nothing about it.
func TestADelayedMessageIsNotMovedAsideForAnUnreachableBroker(t *testing.T) {
	tr := &unreachableFirst{Transport: gochannel.New(gochannel.Config{}), id: "late", times: 8}
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, DB: testenv.SQLite(t),
		DelayedPollInterval: 20 * time.Millisecond, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	var got atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { got.Add(1); return nil }))
	ep := start(t, b, "error")
	require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "late"}, bus.DeliverAt(time.Now().Add(50*time.Millisecond)),
		bus.WithMessageID("late")))
	waitFor(t, "the delayed message after the outage", func() bool { return got.Load() == 1 })
	select {
	case m := <-ep.errors:
		t.Fatalf("moved to the error topic for attempts that reached no broker: %v", m.Metadata)
	case <-time.After(200 * time.Millisecond):
	}
	require.GreaterOrEqual(t, tr.tried.Load(), int32(8), "the broker was out of reach for that many attempts")
}

// unreachableFirst cannot reach the broker for the first publishes of the
// message id (to any topic but "error").
type unreachableFirst struct {
	transport.Transport
	id    string
	times int32
	tried atomic.Int32
}

func (t *unreachableFirst) Publisher() message.Publisher {
	return unreachablePublisher{t.Transport.Publisher(), t}
}

type unreachablePublisher struct {
	message.Publisher
	t *unreachableFirst
}

func (p unreachablePublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.t.id && topic != "error" && p.t.tried.Add(1) <= p.t.times {
			return transport.Unreachable(errors.New("dial tcp 127.0.0.1:5672: connect: connection refused"))
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
	wsql "github.com/postroom/postroom/transport/sql"
)

// TestWithBatchIsValidated: a size out of range, a negative wait and a
// batch of external effects are refused at Handle, each with its reason.
func TestWithBatchIsValidated(t *testing.T) {
	db := testenv.SQLite(t)
	for _, tc := range []struct {
		name string
		opts []bus.HandlerOption
		want string
	}{
		{"size 0", []bus.HandlerOption{bus.WithBatch(0, time.Millisecond)}, "size 0: must be 1 to 1000"},
		{"size over the bound", []bus.HandlerOption{bus.WithBatch(1001, 0)}, "size 1001: must be 1 to 1000"},
		{"negative wait", []bus.HandlerOption{bus.WithBatch(10, -time.Second)}, "maxWait -1s is negative"},
		{"external effects", []bus.HandlerOption{bus.WithBatch(10, 0), bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{}})}, "do not combine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := bus.New(bus.Config{Endpoint: "batches", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			err = bus.Handle(b, func(context.Context, *ConfCmd) error { return nil }, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestALargeBatchOnRabbitMQRuns: a handler holds concurrency × batch size
// messages in flight on one subscription per topic (one channel each on
// RabbitMQ), so concurrency 8 × WithBatch(200), 1,600 in flight, passes
// RabbitMQ's 2,047 channels of a connection: it registers, runs and
// handles what is sent to it. As 1,600 subscriptions per topic it was
// refused at Handle; unrefused, Run failed with "channel id space
// exhausted".
func TestALargeBatchOnRabbitMQRuns(t *testing.T) {
	tr := amqptest.New(t, amqp.Config{})
	db := testenv.SQLite(t)
	c := &confCase{db: db, tr: tr, effects: testenv.Name("effects_"), errorTopic: testenv.Name("error_")}
	require.NoError(t, db.Exec("CREATE TABLE "+c.effects+" (consumer VARCHAR(200) NOT NULL, id VARCHAR(250) NOT NULL, entity VARCHAR(200) NOT NULL DEFAULT '')").Error)
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Concurrency = 8 })
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox(), bus.WithBatch(200, 10*time.Millisecond)))
	run(t, b)
	for range 20 {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	}
	settled(t, b, "conf.Cmd", 20)
	require.Len(t, effects(t, c), 20)
}

// TestBatchOnASequentialTransport: the SQL transport hands out one message
// of a group at a time, so a batch there would hold each message for its
// whole wait. The bus commits each message alone instead: three messages
// are handled well within one batch wait of a minute.
func TestBatchOnASequentialTransport(t *testing.T) {
	db := testenv.Postgres(t)
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	c := &confCase{db: db, tr: tr, effects: testenv.Name("effects_"), errorTopic: testenv.Name("error_")}
	require.NoError(t, db.Exec("CREATE TABLE "+c.effects+" (consumer VARCHAR(200) NOT NULL, id VARCHAR(250) NOT NULL, entity VARCHAR(200) NOT NULL DEFAULT '')").Error)
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox(), bus.WithBatch(100, time.Minute)))
	run(t, b)
	for range 3 {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	}
	settled(t, b, "conf.Cmd", 3)
	require.Len(t, effects(t, c), 3)
}

// TestOneInboxOneVersion: WithInbox takes one Inbox and WithStale one
// version function; more are refused at Handle, not silently merged.
func TestOneInboxOneVersion(t *testing.T) {
	db := testenv.SQLite(t)
	version := func(*message.Message) (stale.Version, error) { return stale.Version{}, nil }
	for _, tc := range []struct {
		name string
		opts []bus.HandlerOption
		want string
	}{
		{"two inboxes in one option", []bus.HandlerOption{bus.WithInbox(bus.Inbox{MessageLog: true}, bus.Inbox{StorePayload: true})}, "WithInbox was given 2 Inbox values"},
		{"two inbox options", []bus.HandlerOption{bus.WithInbox(bus.Inbox{MessageLog: true}), bus.WithInbox(bus.Inbox{StorePayload: true})}, "WithInbox was given 2 Inbox values"},
		{"two versions", []bus.HandlerOption{bus.WithStale(version, version)}, "WithStale was given 2 versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := bus.New(bus.Config{Endpoint: "options", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			err = bus.Handle(b, func(context.Context, *ConfCmd) error { return nil }, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
	b, err := bus.New(bus.Config{Endpoint: "options", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, bus.Handle(b, func(context.Context, *ConfCmd) error { return nil }, bus.WithInbox(), bus.WithStale()), "none is one")
}

// TestTheInboxsMessageLogApplies: Inbox{MessageLog: true} reaches the
// inbox: a message that reuses an ID with another payload goes to the
// error topic as a producer bug, not skipped as a duplicate.
func TestTheInboxsMessageLogApplies(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("log"), DB: testenv.SQLite(t), Logger: testenv.Logger(t),
		Retry: bus.RetryPolicy{NoRetries: true}})
	require.NoError(t, err)
	var handled atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { handled.Add(1); return nil }, bus.WithInbox(bus.Inbox{MessageLog: true})))
	ctx := testbus.Run(t, b)
	require.NoError(t, bus.Send(ctx, b, &CreateInvoice{OrderID: "o-1"}, bus.WithMessageID("reused")))
	require.NoError(t, bus.Send(ctx, b, &CreateInvoice{OrderID: "o-2"}, bus.WithMessageID("reused")))
	require.Eventually(t, func() bool { return b.Counters().Total(metrics.Failed) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, handled.Load())
	require.Zero(t, b.Counters().Total(metrics.Duplicate), "a reused ID is not a duplicate")
}

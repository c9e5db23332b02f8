package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
)

type Order struct{ ID string }

func (Order) MessageName() string { return "test.Order" }

type Shipped struct {
	OrderID string
	Parcel  int
}

func (Shipped) MessageName() string { return "test.Shipped" }

// shipTwice sends two events per order, then fails if told to.
func shipTwice(b **bus.Bus, fail bool) bus.HandlerFunc[Order] {
	return func(ctx context.Context, o *Order) error {
		for parcel := range 2 {
			if err := bus.Publish(ctx, *b, &Shipped{OrderID: o.ID, Parcel: parcel}); err != nil {
				return err
			}
		}
		if fail {
			return errors.New("warehouse refused the order")
		}
		return nil
	}
}

// TestOutboxSendsWithTheCommitAndNothingOnRollback, on PostgreSQL and
// MariaDB: what a handler publishes is written with its transaction, so a
// handler that fails after publishing leaves nothing in the outbox, and
// one that succeeds sends every event.
func TestOutboxSendsWithTheCommitAndNothingOnRollback(t *testing.T) {
	for _, database := range testenv.ServerDatabases {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/handler fails=%v", database.Name, fail), func(t *testing.T) {
				outboxSendsWithTheCommit(t, database.Open(t), fail)
			})
		}
	}
}

func outboxSendsWithTheCommit(t *testing.T, db *gorm.DB, fail bool) {
	require.NoError(t, db.Exec("CREATE TABLE shipped (order_id VARCHAR(50) NOT NULL, parcel INTEGER NOT NULL)").Error)
	var b *bus.Bus
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: gochannel.New(gochannel.Config{}), DB: db, Outbox: true,
		Logger: testenv.Logger(t), Retry: bus.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, shipTwice(&b, fail), bus.WithInbox()))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, s *Shipped) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO shipped (order_id, parcel) VALUES (?, ?)", s.OrderID, s.Parcel).Error
	}, bus.WithInbox()))
	ep := start(t, b, "error")
	require.NoError(t, bus.Send(context.Background(), ep.Bus, &Order{ID: "o-1"}))
	if fail {
		<-ep.errors
		time.Sleep(500 * time.Millisecond) // several relay polls
		var outboxRows int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM watermill_postroom_outbox").Scan(&outboxRows).Error)
		require.Zero(t, outboxRows, "a rolled-back handler left nothing in the outbox")
		require.Zero(t, ep.Counters().Get("test.Shipped", metrics.Received), "nothing was sent")
		backlog, err := ep.OutboxBacklog(context.Background())
		require.NoError(t, err)
		require.Zero(t, backlog.Messages)
		return
	}
	waitFor(t, "both events", func() bool { return ep.Counters().Get("test.Shipped", metrics.Handled) == 2 })
	var rows int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM shipped").Scan(&rows).Error)
	require.EqualValues(t, 2, rows)
}

// TestOutboxBacklogIsAGauge: while the broker refuses the relay, the
// committed messages show as backlog on the metrics endpoint.
func TestOutboxBacklogIsAGauge(t *testing.T) {
	db := testenv.Postgres(t)
	tr := gochannel.New(gochannel.Config{})
	var b *bus.Bus
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: failingTransport{tr}, DB: db, Outbox: true, Logger: testenv.Logger(t),
		Metrics: bus.Metrics{GaugeInterval: 20 * time.Millisecond, Addr: "127.0.0.1:0"}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, shipTwice(&b, false), bus.WithInbox()))
	start(t, b, "error")
	order := message.NewMessage(uuid.NewString(), []byte(`{"ID":"o-1"}`))
	order.Metadata.Set(metadata.MessageType, "test.Order")
	require.NoError(t, tr.Publisher().Publish("test.Order", order)) // past the refusing publisher
	waitFor(t, "a backlog of two", func() bool {
		v, ok := b.Counters().GetGauge(metrics.Gauge(metricseries.OutboxBacklog))
		return ok && v == 2
	})
	resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "postroom_outbox_backlog 2\n")
	require.Contains(t, string(body), "postroom_outbox_lag_seconds ")
}

// TestOutboxRelaysEveryCommit: handlers at concurrency 8 each send one
// message in their transaction (through the outbox, or into the SQL
// transport's table), so the transactions commit their rows in another
// order than the rows' offsets; every message is delivered. On
// MySQL/MariaDB, reading past the relay's highest acked offset loses a row
// whose transaction commits after a higher one was relayed (up to 2% of
// the messages, without a log line).
func TestOutboxRelaysEveryCommit(t *testing.T) {
	const orders = 400
	for _, c := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{{"postgres", testenv.Postgres}, {"mariadb", testenv.MySQL}} {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t)
			cfg := bus.Config{Endpoint: "warehouse", Transport: gochannel.New(gochannel.Config{}), DB: db, Outbox: true,
				Concurrency: 8, Logger: testenv.Logger(t)}
			var b *bus.Bus
			b, err := bus.New(cfg)
			require.NoError(t, err)
			require.NoError(t, bus.Handle(b, func(ctx context.Context, o *Order) error {
				return bus.Publish(ctx, b, &Shipped{OrderID: o.ID})
			}, bus.WithInbox()))
			var shipped sync.Map
			require.NoError(t, bus.Handle(b, func(ctx context.Context, s *Shipped) error {
				shipped.Store(s.OrderID, true)
				return nil
			}))
			ep := start(t, b, "error")
			for i := range orders {
				require.NoError(t, bus.Send(context.Background(), ep.Bus, &Order{ID: fmt.Sprint(i)}))
			}
			waitFor(t, "every order handled", func() bool { return ep.Counters().Get("test.Order", metrics.Handled) == orders })
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && ep.Counters().Get("test.Shipped", metrics.Handled) < orders {
				time.Sleep(50 * time.Millisecond)
			}
			var missing []string
			for i := range orders {
				if _, ok := shipped.Load(fmt.Sprint(i)); !ok {
					missing = append(missing, fmt.Sprint(i))
				}
			}
			require.Empty(t, missing, "events committed and never delivered")
		})
	}
}

// TestARelayThatCannotRunStopsTheBus: the outbox's relay fails for real
// (its tables are missing, and the database role may not create them, as
// in a deployment whose migration missed them): the bus logs it at
// error and stops, and Run returns the relay's error. Otherwise the
// relay's error waits unseen while the handlers run on, and every message
// they send stays in the outbox.
func TestARelayThatCannotRunStopsTheBus(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	admin := testenv.Migrated(t, dsn, "PostgreSQL")
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	schema := u.Query().Get("search_path")
	role := testenv.Name("app_")
	for _, stmt := range []string{
		"DROP TABLE watermill_postroom_outbox, watermill_offsets_postroom_outbox",
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role, // and no CREATE
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		require.NoError(t, admin.Exec(stmt).Error, stmt)
	}
	u.User = url.User(role)
	app, err := store.Open(u.String())
	require.NoError(t, err)
	t.Cleanup(func() {
		store.Close(app)
		admin.Exec("DROP OWNED BY " + role)
		admin.Exec("DROP ROLE " + role)
	})

	errorLines := &errorCounter{inner: testenv.Logger(t).Handler(), n: &atomic.Int32{}}
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: gochannel.New(gochannel.Config{}), DB: app, Outbox: true,
		Logger: slog.New(errorLines)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, shipTwice(&b, false), bus.WithInbox()))
	done := make(chan error, 1)
	go func() { done <- b.Run(context.Background()) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "outbox: create the outbox tables")
		require.ErrorContains(t, err, "permission denied")
	case <-time.After(20 * time.Second):
		t.Fatal("the bus ran on without its outbox relay")
	}
	require.NotZero(t, errorLines.n.Load(), "the relay's failure was not logged at error")
	closeWithin(t, b, 5*time.Second) // Watermill's router of the relay, never run, waited 30 s
}

// TestCloseOfABusThatNeverRan, with an outbox, returns at once.
func TestCloseOfABusThatNeverRan(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: gochannel.New(gochannel.Config{}), DB: testenv.Postgres(t),
		Outbox: true, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, shipTwice(&b, false), bus.WithInbox()))
	closeWithin(t, b, 5*time.Second)
}

func closeWithin(t *testing.T, b *bus.Bus, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(d):
		t.Fatalf("Close took more than %s", d)
	}
}

// TestCloseAfterASubscribeFailed: a handler's subscribe fails (the broker
// or the database refuses it; on the SQL transport a stop during startup
// does it too), so Run returns the error; Close then returns at once.
// Watermill's router, whose handlers never started, would wait its whole
// close timeout (30 s) in Close: past Kubernetes' default grace period.
func TestCloseAfterASubscribeFailed(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: refusingSubscribes{gochannel.New(gochannel.Config{})},
		DB: testenv.SQLite(t), Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *Order) error { return nil }))
	ran := make(chan error, 1)
	go func() { ran <- b.Run(context.Background()) }()
	select {
	case err := <-ran:
		require.ErrorIs(t, err, errSubscribeRefused)
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on after its subscribe failed")
	}
	closeWithin(t, b, 5*time.Second)
}

var errSubscribeRefused = errors.New("subscribe refused")

// refusingSubscribes is a transport whose subscriptions all fail.
type refusingSubscribes struct{ transport.Transport }

func (t refusingSubscribes) Subscriber(group string, inFlight int) (message.Subscriber, error) {
	sub, err := t.Transport.Subscriber(group, inFlight)
	return refusingSubscriber{sub}, err
}

type refusingSubscriber struct{ message.Subscriber }

func (refusingSubscriber) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return nil, errSubscribeRefused
}

// TestARoutineStopWithTheOutboxLogsNothingAtError: a bus with the outbox
// stopped right after its handlers sent: the relay's poll or ack cut short
// by the stop is no error: watermill-sql's "Error querying for message …
// context canceled" (or "… driver: bad connection", "could not rollback tx
// … conn closed") at such a stop is not logged at error.
func TestARoutineStopWithTheOutboxLogsNothingAtError(t *testing.T) {
	db := testenv.Postgres(t)
	endpoint := testenv.Name("warehouse") // one service, stopped and started again
	for round := range 5 {
		logs := newRecordedLogs()
		var b *bus.Bus
		b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: gochannel.New(gochannel.Config{}), DB: db,
			Outbox: true, Logger: slog.New(logs), Cleanup: bus.CleanupSchedule{Disabled: true}})
		require.NoError(t, err)
		var shipped atomic.Int32
		require.NoError(t, bus.Handle(b, shipTwice(&b, false), bus.WithInbox()))
		require.NoError(t, bus.Handle(b, func(context.Context, *Shipped) error { shipped.Add(1); return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		<-b.Running()
		require.NoError(t, bus.Send(ctx, b, &Order{ID: fmt.Sprint(round)}))
		// At least: a relay stopped before its ack committed relays its
		// last messages again when the next one starts.
		require.Eventually(t, func() bool { return shipped.Load() >= 2 }, 20*time.Second, time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, b.Close())
		first, n := logs.atLeast(slog.LevelError)
		require.Zero(t, n, "round %d: %s", round, first)
	}
}

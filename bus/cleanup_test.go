package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestCleanupIsScheduledWithTheInbox: a bus with an inbox handler purges
// expired inbox keys on its own once the cleanup slot comes.
func TestCleanupIsScheduledWithTheInbox(t *testing.T) {
	db := testenv.SQLite(t)
	d, err := dialects.Of(db)
	require.NoError(t, err)
	var now atomic.Int64
	t0 := time.Date(2026, 6, 1, 11, 30, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	old, recent := t0.Add(-11*24*time.Hour), t0.Add(-time.Hour)
	require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing/h", "", "old", "t", d.Time(old)).Error)
	require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing/h", "", "recent", "t", d.Time(recent)).Error)
	// Another endpoint's key on the same database: its own cleanup, with
	// its own retention, purges it. This endpoint's cleanup leaves it: a
	// purge here could fall inside the other's redelivery window.
	require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing_eu/h", "", "other's", "t", d.Time(old)).Error)

	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: testenv.Logger(t), Now: clock, Cleanup: bus.CleanupSchedule{Interval: time.Hour}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	var ids []string
	require.NoError(t, db.Raw("SELECT message_id FROM postroom_inbox ORDER BY message_id").Scan(&ids).Error)
	require.Equal(t, []string{"old", "other's", "recent"}, ids, "nothing purged before the slot")

	now.Store(t0.Add(45 * time.Minute).UnixNano()) // past the 12:00 slot
	waitFor(t, "the scheduled cleanup", func() bool {
		ids = nil
		require.NoError(t, db.Raw("SELECT message_id FROM postroom_inbox ORDER BY message_id").Scan(&ids).Error)
		return len(ids) == 2
	})
	require.Equal(t, []string{"other's", "recent"}, ids, "this endpoint's old key purged, another endpoint's kept")
}

// TestACleanupStoreNeverPurgesInsideTheRetention: a CleanupStore sent by
// hand (or emitted by an instance with another retention) purges no key
// younger than the endpoint's InboxRetention, whatever its Retention or
// Before say. Otherwise a CleanupStore{Retention: time.Minute} purges a
// key ten minutes old, and its redelivery runs the handler again; and a
// CleanupStore{} purges after 10 days under a 30-day retention.
func TestACleanupStoreNeverPurgesInsideTheRetention(t *testing.T) {
	db := testenv.SQLite(t)
	d, err := dialects.Of(db)
	require.NoError(t, err)
	now := time.Now().UTC()
	for id, age := range map[string]time.Duration{"10m": 10 * time.Minute, "15d": 15 * 24 * time.Hour, "31d": 31 * 24 * time.Hour} {
		require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing/h", "", id, "t", d.Time(now.Add(-age))).Error)
	}
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: testenv.Logger(t), InboxRetention: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	ids := func() []string {
		var ids []string
		require.NoError(t, db.Raw("SELECT message_id FROM postroom_inbox ORDER BY message_id").Scan(&ids).Error)
		return ids
	}
	for i, m := range []*handlers.CleanupStore{{Retention: time.Minute}, {}, {Before: now.Add(time.Hour)}} {
		require.NoError(t, bus.Send(context.Background(), b, m, bus.WithMessageID(fmt.Sprintf("cleanup-%d", i))))
	}
	waitFor(t, "the three CleanupStore handled", func() bool { return b.Counters().Get("postroom.CleanupStore", metrics.Handled) == 3 })
	require.Equal(t, []string{"10m", "15d"}, ids(), "keys inside the 30-day retention kept")
}

// TestTheScheduledCleanupSaysNothingAtWarn: the bus's own CleanupStore
// asks for its InboxRetention exactly, which is not said at warn (the
// first version of the clamp compared two readings of the clock and
// warned at every slot).
func TestTheScheduledCleanupSaysNothingAtWarn(t *testing.T) {
	log, logs := testenv.CapturedLogger(slog.LevelWarn)
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: log, Cleanup: bus.CleanupSchedule{Interval: time.Second}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	waitFor(t, "a scheduled cleanup handled", func() bool { return b.Counters().Get("postroom.CleanupStore", metrics.Handled) > 0 })
	require.NotContains(t, logs.String(), "cleanup:")
}

func TestShortRetentionIsRefused(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "billing", DB: testenv.SQLite(t), InboxRetention: 30 * time.Minute})
	require.NoError(t, err)
	err = bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox())
	require.ErrorContains(t, err, "retention 30m0s is shorter than the retry and redelivery horizon")
	require.ErrorContains(t, err, "raise the retention")
	// Watermarks are purged after the same retention: a handler WithStale
	// alone is checked too.
	err = bus.Handle(b, func(context.Context, *CustomerMoved) error { return nil }, bus.WithStale())
	require.ErrorContains(t, err, "retention 30m0s is shorter than the retry and redelivery horizon")
}

// TestRetentionCoversDelayedRetries: a delayed retry runs long after the
// first delivery; a copy handled meanwhile leaves a key that must outlive
// it, or the retry applies the message again: a 2 h retention with 24 h
// delays is refused.
func TestRetentionCoversDelayedRetries(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "billing", DB: testenv.SQLite(t), InboxRetention: 2 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()), "2 h covers the default horizon")
	err = bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithInbox(), bus.WithDelayedRetries(24*time.Hour))
	require.ErrorContains(t, err, "retention 2h0m0s is shorter than the retry and redelivery horizon")
}

// TestCleanupWiring: a handler with only a transaction keeps nothing to
// purge and needs no postroom tables; a Run that failed once the cleanup
// handler was registered can be called again.
func TestCleanupWiring(t *testing.T) {
	t.Run("a handler with only WithTransaction switches no cleanup on", func(t *testing.T) {
		db, err := store.Open(testenv.SQLiteDSN(t)) // not migrated
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close(db) })
		b, err := bus.New(bus.Config{Endpoint: "plain", DB: db, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithTransaction()))
		run(t, b)
	})
	t.Run("a failed Run can be called again", func(t *testing.T) {
		db := testenv.SQLite(t)
		require.NoError(t, db.Exec("DROP TABLE postroom_schedules").Error)
		b, err := bus.New(bus.Config{Endpoint: "retried", DB: db, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
		require.ErrorContains(t, b.Run(context.Background()), "postroom migrate")
		require.NoError(t, db.Exec("DELETE FROM postroom_migrations").Error) // so that Migrate creates the table again
		_, err = store.Migrate(context.Background(), db, store.Tables{})
		require.NoError(t, err)
		run(t, b)
	})
}

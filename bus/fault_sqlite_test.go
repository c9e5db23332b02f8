package bus_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestSQLiteWriteLockHeldElsewhere is SQLite's outage: another program
// (here another connection pool, as a second process or the sqlite3
// shell would be) holds the file's write lock for 25 s, past the busy
// timeout (store.BusyTimeoutDefault, 10 s), while messages keep arriving
// for a handler with the inbox and no retries at all. An attempt ends in
// "database is locked", which is transient: the handler waits the lock out
// without spending retries. Nothing reaches the error topic, nothing is
// lost or applied twice. (With retries, each attempt waiting out the busy
// timeout, a lock of a few retries' length would pass unnoticed: none
// makes the first failure count. A lock shorter than about two busy
// timeouts may end before any attempt fails: the bus's one SQLite
// connection is taken in turn; the test checks that one did.)
func TestSQLiteWriteLockHeldElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: holds a SQLite lock for 25 s")
	}
	dsn := testenv.SQLiteDSN(t)
	db := testenv.Migrated(t, dsn, "SQLite")
	require.NoError(t, db.Exec("CREATE TABLE effects (message_id VARCHAR(100) NOT NULL, n INTEGER NOT NULL)").Error)
	errorTopic := testenv.Name("error_")
	logs := newRecordedLogs()
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: db,
		ErrorTopic: errorTopic, Retry: bus.RetryPolicy{NoRetries: true}, Logger: slog.New(logs), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, w *Work) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO effects (message_id, n) VALUES (?, ?)", bus.MessageID(ctx), w.N).Error
	}, bus.WithInbox()))
	ep := start(t, b, errorTopic)

	const messages = 150
	var sent atomic.Int32
	sendDone := make(chan struct{})
	go func() { // a steady load: the lock is taken a third of the way through
		defer close(sendDone)
		for n := range messages {
			if err := bus.Send(context.Background(), b, &Work{N: n}, bus.To(b.Endpoint()), bus.WithMessageID(workID(n))); err != nil {
				t.Errorf("send %d: %v", n, err)
				return
			}
			sent.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	waitFor(t, "a third of the messages sent", func() bool { return sent.Load() >= messages/3 })

	other, err := store.Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(other) })
	sqlDB, err := other.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	held := time.Now()
	time.Sleep(25 * time.Second)
	_, err = conn.ExecContext(context.Background(), "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	t.Logf("write lock held elsewhere for %s", time.Since(held).Round(time.Millisecond))

	<-sendDone
	var rows, distinct int64
	waitFor(t, "every message applied", func() bool {
		require.NoError(t, db.Raw("SELECT COUNT(*), COUNT(DISTINCT n) FROM effects").Row().Scan(&rows, &distinct))
		return distinct == messages
	})
	select {
	case m := <-ep.errors:
		t.Fatalf("a message reached the error topic while SQLite was locked: %s %v", m.UUID, m.Metadata)
	case <-time.After(500 * time.Millisecond):
	}
	require.EqualValues(t, messages, rows, "nothing applied twice")
	require.EqualValues(t, messages, b.Counters().Get("test.Work", metrics.Handled))
	failed, n := logs.find(slog.LevelWarn, "bus: attempt failed")
	require.NotZero(t, n, "no attempt failed: the lock was not felt, and the test tested nothing")
	require.Contains(t, failed, "transient=true", "the attempt that failed on the lock: %s", failed)
}

package bus_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestADeadlockVictimIsRetriedWithoutSpendingARetry: two messages whose
// transactions lock two rows in opposite orders deadlock; the database
// ends one of them (PostgreSQL 40P01, MariaDB 1213). The victim lost to
// another transaction, not to its own fault: it is retried without
// spending a retry, so with no retries at all both messages are applied
// and nothing reaches the error topic. A victim that spends a retry like
// any failure goes straight to the error topic here. WithBatch batches of
// competing processes, which claim keys in arrival order, deadlock this
// way (as in TestChaos).
func TestADeadlockVictimIsRetriedWithoutSpendingARetry(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			table := testenv.Name("locks_")
			require.NoError(t, db.Exec("CREATE TABLE "+table+" (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)").Error)
			require.NoError(t, db.Exec("INSERT INTO "+table+" (id, v) VALUES (1, 0), (2, 0)").Error)
			errorTopic := testenv.Name("error_")
			b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: db,
				ErrorTopic: errorTopic, Retry: bus.RetryPolicy{NoRetries: true},
				Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
			require.NoError(t, err)
			// Each message's first attempt waits, holding its first row,
			// until the other holds its own: then each asks for the other's.
			var holding sync.WaitGroup
			holding.Add(2)
			var once [3]sync.Once
			require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
				first, second := m.N, 3-m.N
				if err := unitofwork.Tx(ctx).Exec("UPDATE "+table+" SET v = v + 1 WHERE id = ?", first).Error; err != nil {
					return err
				}
				once[m.N].Do(func() {
					holding.Done()
					waitGroupOrTimeout(&holding, 10*time.Second)
				})
				return unitofwork.Tx(ctx).Exec("UPDATE "+table+" SET v = v + 1 WHERE id = ?", second).Error
			}, bus.WithTransaction(), bus.WithConcurrency(2)))
			ep := start(t, b, errorTopic)
			for n := 1; n <= 2; n++ {
				require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: n}, bus.To(b.Endpoint())))
			}
			c := b.Counters()
			waitFor(t, "both messages to settle", func() bool {
				return c.Get("conf.Cmd", metrics.Handled)+c.Get("conf.Cmd", metrics.Failed) >= 2
			})
			select {
			case m := <-ep.errors:
				t.Fatalf("the deadlock's victim went to the error topic: %s", m.Metadata)
			case <-time.After(200 * time.Millisecond):
			}
			require.EqualValues(t, 2, c.Get("conf.Cmd", metrics.Handled))
			require.NotZero(t, c.Get("conf.Cmd", metrics.Retried), "no deadlock happened: the check did not test anything")
			var sum int
			require.NoError(t, db.Raw("SELECT SUM(v) FROM "+table).Scan(&sum).Error)
			require.Equal(t, 4, sum, "each message's two updates applied once")
		})
	}
}

// TestContentionRetriesAreBounded: a handler that loses to another
// transaction at every attempt (here it returns serialization failure
// 40001 each time) is retried without spending a retry only
// MaxContentionRetries times; the next failure spends retries like any
// other, and with none the message reaches the error topic after
// MaxContentionRetries+1 attempts. It caught the bound dropped from the
// contention check: the message was then retried for ever and never
// reached the error topic.
func TestContentionRetriesAreBounded(t *testing.T) {
	t.Parallel()
	contended := &pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}
	require.True(t, dialect.Contention(contended), "the handler's error is a contention")
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: testenv.SQLite(t),
		ErrorTopic: errorTopic, Retry: bus.RetryPolicy{NoRetries: true},
		Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	var attempts atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *ConfCmd) error {
		attempts.Add(1)
		return contended
	}))
	ep := start(t, b, errorTopic)
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: 1}, bus.To(b.Endpoint())))
	want := bus.MaxContentionRetries + 1
	select {
	case failed := <-ep.errors:
		require.Equal(t, want, bus.ErrorAttempts(failed), "the attempts of %s", failed.Metadata)
	case <-time.After(10 * time.Second): // the pauses of MaxContentionRetries retries take under 3 s
		t.Fatalf("the message did not reach the error topic after %d contended attempts", attempts.Load())
	}
	require.EqualValues(t, want, attempts.Load())
}

// waitGroupOrTimeout waits for wg, at most d.
func waitGroupOrTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

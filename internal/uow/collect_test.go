package uow_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
)

// stores runs f on each store: the transaction's behaviour after a failed
// statement differs between them.
func stores(t *testing.T, f func(t *testing.T, db *gorm.DB)) {
	for _, s := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{{"sqlite", testenv.SQLite}, {"postgres", testenv.Postgres}, {"mysql", testenv.MySQL}} {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t)
			require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
			f(t, db)
		})
	}
}

func countEffects(t *testing.T, db *gorm.DB) (n int64) {
	t.Helper()
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
	return n
}

// addAll adds each item from a goroutine of its own and returns their
// errors as they come back.
func addAll(c *uow.Collector, ctx context.Context, items ...string) <-chan error {
	errs := make(chan error, len(items))
	for _, it := range items {
		go func() { errs <- c.Add(ctx, it) }()
	}
	return errs
}

// within returns the next error of errs, failing the test after d.
func within(t *testing.T, errs <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(d):
		t.Fatal(what)
		return nil
	}
}

// TestCollectorRollbackOnly: a batch whose function marks it RollbackOnly
// keeps nothing it wrote, with one item as with many.
func TestCollectorRollbackOnly(t *testing.T) {
	stores(t, func(t *testing.T, db *gorm.DB) {
		for _, size := range []int{1, 2} {
			c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: size, BatchWait: time.Minute}, func(ctx context.Context, items []*uow.Collected) error {
				for _, it := range items {
					if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", it.Item).Error; err != nil {
						return err
					}
				}
				uow.RollbackOnly(ctx)
				return nil
			})
			require.NoError(t, err)
			items := []string{"a", "b"}[:size]
			errs := addAll(c, context.Background(), items...)
			for range items {
				require.NoError(t, within(t, errs, 30*time.Second, "the batch did not end"))
			}
			require.Zero(t, countEffects(t, db), "a batch of %d marked RollbackOnly committed its writes", size)
		}
	})
}

// TestCollectorGoexit: a function that ends its goroutine with
// runtime.Goexit (t.FailNow in a test) neither commits what it wrote nor
// leaves the batch's other items waiting.
func TestCollectorGoexit(t *testing.T) {
	db := testenv.SQLite(t)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 2, BatchWait: time.Minute}, func(ctx context.Context, items []*uow.Collected) error {
		if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES ('a')").Error; err != nil {
			return err
		}
		runtime.Goexit()
		return nil
	})
	require.NoError(t, err)
	errs := addAll(c, context.Background(), "a", "b") // the one whose goroutine ends the batch never returns
	require.Error(t, within(t, errs, 30*time.Second, "the other item waits for a batch that never ends"))
	require.Zero(t, countEffects(t, db), "the writes of a function that did not return were committed")
}

// TestCollectorStopsWithItsItems: once the context of every item of a batch
// is done (the bus stops), the context of the batch's function is too, so
// a long call stops instead of holding the shutdown.
func TestCollectorStopsWithItsItems(t *testing.T) {
	db := testenv.SQLite(t)
	c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 2, BatchWait: time.Minute}, func(ctx context.Context, _ []*uow.Collected) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errs := addAll(c, ctx, "a", "b")
	time.Sleep(50 * time.Millisecond) // both joined, the function waits
	cancel()
	for range 2 {
		require.ErrorIs(t, within(t, errs, 30*time.Second, "the batch's function did not see its items' contexts end"), context.Canceled)
	}
}

// TestCollectorSettle: while messages come one at a time, a message that
// arrives while the batch before it runs waits for it, not for BatchWait (a
// minute here: the test would time out): Settle ends its batch once the
// message before has left.
func TestCollectorSettle(t *testing.T) {
	db := testenv.SQLite(t)
	var inFlight atomic.Int64
	release := make(chan struct{})
	first := true
	c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 100, BatchWait: time.Minute, InFlight: func() int { return int(inFlight.Load()) }},
		func(ctx context.Context, _ []*uow.Collected) error {
			if first {
				first = false
				<-release
			}
			return nil
		})
	require.NoError(t, err)
	inFlight.Add(1)
	firstDone := addAll(c, context.Background(), "a")
	time.Sleep(50 * time.Millisecond) // a's batch of one runs
	inFlight.Add(1)
	secondDone := addAll(c, context.Background(), "b")
	time.Sleep(50 * time.Millisecond) // b waits for a, in flight
	close(release)
	require.NoError(t, within(t, firstDone, 30*time.Second, "a's batch did not end"))
	inFlight.Add(-1)
	c.Settle()
	require.NoError(t, within(t, secondDone, 30*time.Second, "b's batch waited for BatchWait after a had left"))
}

// TestSavepointOfSwallowedError: on PostgreSQL a statement that fails
// aborts the whole transaction; a function that ignores its error must
// fail its savepoint alone (ErrSavepointAborted, its writes rolled back),
// not the transaction. Elsewhere a failed statement leaves the
// transaction usable and the savepoint commits.
func TestSavepointOfSwallowedError(t *testing.T) {
	stores(t, func(t *testing.T, db *gorm.DB) {
		var spErr error
		c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 1}, func(ctx context.Context, _ []*uow.Collected) error {
			spErr = uow.Savepoint(ctx, func(ctx context.Context) error {
				if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES ('swallowed')").Error; err != nil {
					return err
				}
				_ = uow.Tx(ctx).Exec("INSERT INTO no_such_table (id) VALUES ('x')").Error // the error ignored
				return nil
			})
			return uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES ('kept')").Error
		})
		require.NoError(t, err)
		require.NoError(t, c.Add(context.Background(), "a"), "the transaction outside the savepoint commits")
		var ids []string
		require.NoError(t, db.Raw("SELECT id FROM effects ORDER BY id").Scan(&ids).Error)
		if db.Dialector.Name() == "postgres" {
			require.ErrorIs(t, spErr, uow.ErrSavepointAborted)
			require.Equal(t, []string{"kept"}, ids)
		} else {
			require.NoError(t, spErr)
			require.Equal(t, []string{"kept", "swallowed"}, ids)
		}
		require.False(t, errors.Is(spErr, uow.ErrBatchBroken))
	})
}

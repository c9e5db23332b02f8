package unitofwork_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

// roundTrips records what pgx sent, one entry per round trip: a statement
// alone, or a batch's statements joined by " + ".
type roundTrips struct {
	mu    sync.Mutex
	sent  []string
	batch []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.ToLower(strings.Fields(d.SQL)[0]))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *roundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batch = append(r.batch, strings.ToLower(strings.Fields(d.SQL)[0]))
}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.Join(r.batch, " + "))
	r.batch = nil
}

func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

// tracedPostgres opens a fresh PostgreSQL schema through pgx's database/sql
// driver, as store.Open does, with one connection in the pool (a
// connection the unit of work does not give back makes the next unit wait
// for ever) and a tracer of what goes over the wire.
func tracedPostgres(t *testing.T) (*gorm.DB, *roundTrips) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.PostgresSchemaDSN(t))
	require.NoError(t, err)
	trips := &roundTrips{}
	cfg.Tracer = trips
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	sqlDB.SetMaxOpenConns(1)
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(40) PRIMARY KEY)").Error)
	trips.take()
	return db, trips
}

// runFirstExec runs a unit whose first statement goes through Exec (as the
// inbox's claim does), then calls handler.
func runFirstExec(ctx context.Context, db *gorm.DB, id string, handler func(ctx context.Context) error) error {
	msg := message.NewMessage(id, nil)
	msg.SetContext(ctx)
	_, err := unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := unitofwork.Exec(msg.Context(), "INSERT INTO effects (id) VALUES ($1)", id+"-claim"); err != nil {
			return nil, err
		}
		return nil, handler(msg.Context())
	})
	return err
}

func effects(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var ids []string
	require.NoError(t, db.Raw("SELECT id FROM effects ORDER BY id COLLATE \"C\"").Scan(&ids).Error)
	return ids
}

// TestTheFirstStatementBeginsTheTransactionInItsRoundTrip: on PostgreSQL
// BEGIN goes out with the unit's first statement, so a message with a
// claim and one write costs three round trips, not four.
func TestTheFirstStatementBeginsTheTransactionInItsRoundTrip(t *testing.T) {
	db, trips := tracedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, runFirstExec(ctx, db, "m-1", func(ctx context.Context) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", "m-1").Error
	}))
	require.Equal(t, []string{"begin + insert", "insert", "commit"}, trips.take())
	require.Equal(t, []string{"m-1", "m-1-claim"}, effects(t, db))
}

// TestAPipelinedTransactionEndsCleanly: the transaction that began with its
// first statement commits only what its handler meant, and always gives its
// connection back in a state the next message can use (the pool holds one
// connection: a connection kept, or given back inside a transaction, fails
// the next step).
func TestAPipelinedTransactionEndsCleanly(t *testing.T) {
	db, _ := tracedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := func(id string) {
		t.Helper()
		require.NoError(t, runFirstExec(ctx, db, id, func(context.Context) error { return nil }), "the next message on the pool's one connection")
	}

	// A write whose error the handler swallowed: PostgreSQL answers the
	// COMMIT with ROLLBACK, and the message fails.
	err := runFirstExec(ctx, db, "swallowed", func(ctx context.Context) error {
		_ = unitofwork.Tx(ctx).Exec("INSERT INTO no_such_table VALUES (1)").Error
		return nil
	})
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
	next("after-swallowed")

	// The first statement fails: the transaction is rolled back.
	err = runFirstExec(ctx, db, "after-swallowed", func(context.Context) error { return nil })
	require.Error(t, err, "the claim's key is taken")
	next("after-failed-first")

	// The handler fails, or panics, after the first statement.
	require.Error(t, runFirstExec(ctx, db, "failed", func(context.Context) error { return errors.New("handler failed") }))
	next("after-failed")
	require.Panics(t, func() {
		_ = runFirstExec(ctx, db, "panicked", func(context.Context) error { panic("handler panicked") })
	})
	next("after-panicked")

	// Rollback-only: acked, nothing kept.
	require.NoError(t, runFirstExec(ctx, db, "rollback-only", func(ctx context.Context) error {
		unitofwork.RollbackOnly(ctx)
		return nil
	}))
	next("after-rollback-only")

	// The message's context ends before the commit: nothing is kept.
	msgCtx, end := context.WithCancel(ctx)
	require.Error(t, runFirstExec(msgCtx, db, "ended", func(context.Context) error {
		end()
		return nil
	}))
	next("after-ended")

	// The server ends the connection in the middle of the transaction: the
	// commit fails and the pool opens a new connection for the next.
	require.Error(t, runFirstExec(ctx, db, "killed", func(ctx context.Context) error {
		var pid int
		if err := unitofwork.Tx(ctx).Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
			return err
		}
		killer, err := store.Open(testenv.PostgresDSN())
		if err != nil {
			return err
		}
		defer func() {
			if sqlDB, err := killer.DB(); err == nil {
				_ = sqlDB.Close()
			}
		}()
		return killer.Exec("SELECT pg_terminate_backend(?)", pid).Error
	}))
	next("after-killed")

	require.Equal(t, []string{
		"after-ended-claim", "after-failed-claim", "after-failed-first-claim", "after-killed-claim",
		"after-panicked-claim", "after-rollback-only-claim", "after-swallowed-claim",
	}, effects(t, db))
}

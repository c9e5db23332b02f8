package pgdriver_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/pgdriver"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
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

// tracedPostgres opens a fresh PostgreSQL schema through the driver, as
// store.Open does, with one connection in the pool (a
// connection the unit of work does not give back makes the next unit wait
// for ever) and a tracer of what goes over the wire.
func tracedPostgres(t *testing.T, configure ...func(*pgx.ConnConfig)) (*gorm.DB, *roundTrips) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.PostgresSchemaDSN(t))
	require.NoError(t, err)
	for _, f := range configure {
		f(cfg)
	}
	trips := &roundTrips{}
	cfg.Tracer = trips
	sqlDB := pgdriver.OpenConfig(*cfg)
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
		if _, err := uow.Exec(msg.Context(), "INSERT INTO effects (id) VALUES ($1)", id+"-claim"); err != nil {
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

// TestATransactionWhoseBeginWaitsIsStillDatabaseSQLs: the transaction is
// database/sql's *sql.Tx, whatever its BEGIN waits for: a handler's
// prepared-statement session writes inside it, its context's end rolls it
// back at once (the claim's lock is not held while a handler that ignores
// its context goes on), rows left open do not hold up the commit, and a
// first statement that does not even parse aborts the transaction, as
// PostgreSQL would have.
func TestATransactionWhoseBeginWaitsIsStillDatabaseSQLs(t *testing.T) {
	db, trips := tracedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A prepared-statement session of the handler's transaction, for its
	// first statement.
	msg := message.NewMessage("prepared", nil)
	msg.SetContext(ctx)
	_, err := unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		if err := unitofwork.Tx(msg.Context()).Session(&gorm.Session{PrepareStmt: true}).Exec("INSERT INTO effects (id) VALUES (?)", "prepared").Error; err != nil {
			return nil, err
		}
		return nil, errors.New("fails after its write")
	})
	require.Error(t, err)
	require.Empty(t, effects(t, db), "a write of the failed message was kept")

	// The message's context ends while its handler goes on.
	other, err := store.Open(testenv.PostgresDSN())
	require.NoError(t, err)
	defer func() { _ = store.Close(other) }()
	var schema string
	require.NoError(t, db.Raw("SELECT current_schema()").Scan(&schema).Error)
	msgCtx, end := context.WithCancel(ctx)
	require.Error(t, runFirstExec(msgCtx, db, "ended", func(context.Context) error {
		end()
		// The claim's key is free at once: the same INSERT from another
		// connection neither waits nor conflicts.
		stmtCtx, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		return other.WithContext(stmtCtx).Exec("INSERT INTO "+schema+".effects (id) VALUES (?)", "ended-claim").Error
	}))
	require.Equal(t, []string{"ended-claim"}, effects(t, db))

	// Rows left open.
	require.NoError(t, runFirstExec(ctx, db, "rows", func(ctx context.Context) error {
		_, err := unitofwork.Tx(ctx).Raw("SELECT id FROM effects").Rows()
		return err
	}))
	require.Equal(t, []string{"ended-claim", "rows-claim"}, effects(t, db))

	// A first statement that does not parse, its error swallowed (pgx
	// prepares it before the batch: BEGIN never runs).
	trips.take()
	msg = message.NewMessage("unparsed", nil)
	msg.SetContext(ctx)
	_, err = unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		_, _ = uow.Exec(msg.Context(), "INSERT INTO no_such_table (id) VALUES ($1)", "x")
		return nil, unitofwork.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", "unparsed").Error
	})
	require.ErrorContains(t, err, "transaction is aborted")
	require.ErrorContains(t, err, "no_such_table", "the error names the first statement's")
	require.NotContains(t, effects(t, db), "unparsed")
	require.NotContains(t, trips.take(), "commit", "nothing began, nothing to commit")

	// A first statement that reads: BEGIN goes alone first.
	msg = message.NewMessage("read", nil)
	msg.SetContext(ctx)
	_, err = unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		var n int
		if err := unitofwork.Tx(msg.Context()).Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error; err != nil {
			return nil, err
		}
		return nil, unitofwork.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", "read").Error
	})
	require.NoError(t, err)
	require.Equal(t, []string{"begin", "select", "insert", "commit"}, trips.take())

	// A transaction with an isolation level begins as pgx's does.
	require.NoError(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Exec("INSERT INTO effects (id) VALUES (?)", "serializable").Error
	}, &sql.TxOptions{Isolation: sql.LevelSerializable}))
	require.Equal(t, []string{"begin", "insert", "commit"}, trips.take())
	require.Equal(t, []string{"ended-claim", "read", "rows-claim", "serializable"}, effects(t, db))
}

// TestRawGivesPgxsConnection: code that reaches the driver's connection
// through sql.Conn.Raw (pgx's CopyFrom, listen/notify) gets pgx's
// connection from its Conn method.
func TestRawGivesPgxsConnection(t *testing.T) {
	db, _ := tracedPostgres(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sqlDB.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	require.NoError(t, c.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		require.True(t, ok, "%T has no Conn() *pgx.Conn", dc)
		n, err := pc.Conn().CopyFrom(ctx, pgx.Identifier{"effects"}, []string{"id"}, pgx.CopyFromRows([][]any{{"copied"}}))
		require.EqualValues(t, 1, n)
		return err
	}))
	require.NoError(t, c.Close()) // the pool's one connection
	require.Equal(t, []string{"copied"}, effects(t, db))
}

// TestEveryFirstStatementRunsInsideItsTransaction: the first statements a
// batch cannot carry as pgx's Exec would send them begin the transaction
// on their own, and a statement prepared on the pool and reused in a
// transaction runs through the driver too. Each case writes as its
// transaction's first statement, and its handler then fails: nothing it
// wrote may be kept (before the review's fix, the prepared statement's
// write was, having run outside the transaction).
func TestEveryFirstStatementRunsInsideItsTransaction(t *testing.T) {
	firstThenFail := func(t *testing.T, db *gorm.DB, first func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msg := message.NewMessage("m", nil)
		msg.SetContext(ctx)
		_, err := unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
			if err := first(msg.Context()); err != nil {
				return nil, err
			}
			return nil, errors.New("fails after its write")
		})
		require.EqualError(t, err, "fails after its write")
	}
	insert := "INSERT INTO effects (id) VALUES ($1)"

	t.Run("prepared on the pool first", func(t *testing.T) {
		db, trips := tracedPostgres(t)
		prepared := db.Session(&gorm.Session{PrepareStmt: true})
		require.NoError(t, prepared.Exec("INSERT INTO effects (id) VALUES (?)", "warm").Error)
		firstThenFail(t, db, func(ctx context.Context) error {
			return unitofwork.Tx(ctx).Session(&gorm.Session{PrepareStmt: true}).Exec("INSERT INTO effects (id) VALUES (?)", "kept").Error
		})
		require.Equal(t, []string{"warm"}, effects(t, db))
		require.Contains(t, trips.take(), "begin + insert", "the prepared statement still goes with BEGIN")
	})
	t.Run("several statements without arguments", func(t *testing.T) {
		db, _ := tracedPostgres(t)
		firstThenFail(t, db, func(ctx context.Context) error {
			_, err := uow.Exec(ctx, "INSERT INTO effects (id) VALUES ('one'); INSERT INTO effects (id) VALUES ('two')")
			return err
		})
		require.Empty(t, effects(t, db))
	})
	t.Run("pgx's query mode before the arguments", func(t *testing.T) {
		db, _ := tracedPostgres(t)
		firstThenFail(t, db, func(ctx context.Context) error {
			_, err := uow.Exec(ctx, insert, pgx.QueryExecModeSimpleProtocol, "kept")
			return err
		})
		require.Empty(t, effects(t, db))
	})
	t.Run("no statement cache", func(t *testing.T) {
		db, _ := tracedPostgres(t, func(cfg *pgx.ConnConfig) {
			cfg.StatementCacheCapacity, cfg.DescriptionCacheCapacity = 0, 0
			cfg.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec
		})
		firstThenFail(t, db, func(ctx context.Context) error {
			_, err := uow.Exec(ctx, insert, "kept")
			return err
		})
		require.Empty(t, effects(t, db))
	})
	t.Run("simple protocol", func(t *testing.T) {
		db, trips := tracedPostgres(t, func(cfg *pgx.ConnConfig) { cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
		firstThenFail(t, db, func(ctx context.Context) error {
			_, err := uow.Exec(ctx, insert, "kept")
			return err
		})
		require.Empty(t, effects(t, db))
		require.Contains(t, trips.take(), "begin + insert")
	})
}

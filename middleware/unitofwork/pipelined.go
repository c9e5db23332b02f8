package unitofwork

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// On PostgreSQL through pgx, a unit's transaction begins in the same round
// trip as its first statement: BEGIN and the statement go out in one
// write (pgx's pipeline) instead of BEGIN waiting for its answer first.
// The inbox's claim or the stale check is that first statement, so a
// message costs three round trips (BEGIN with the claim, the handler's
// write, COMMIT) instead of four. database/sql's *sql.Tx cannot do this
// (its BeginTx sends BEGIN alone), so the transaction runs on a connection
// taken from the pool (*sql.Conn) with BEGIN, COMMIT and ROLLBACK of its
// own: pgTx.

// errCommitRolledBack is the error of a COMMIT that PostgreSQL answered
// with ROLLBACK: a statement of the transaction had failed, so nothing was
// kept. database/sql's transaction reports it the same way (pgx's
// ErrTxCommitRollback).
var errCommitRolledBack = pgx.ErrTxCommitRollback

// pipelines reports whether db's transactions can begin with their first
// statement: db is a connection pool of pgx's database/sql driver, and no
// transaction timeout is configured (*sql.Tx enforces it; a pgTx would
// not).
func pipelines(db *gorm.DB) (*sql.DB, bool) {
	pool, ok := db.Statement.ConnPool.(*sql.DB)
	if !ok || db.DefaultTransactionTimeout > 0 {
		return nil, false
	}
	_, ok = pool.Driver().(*stdlib.Driver)
	return pool, ok
}

// beginWith begins a transaction on a connection of pool and runs query in
// it, both in one round trip. It returns the transaction, or nil when
// BEGIN failed (then the connection went back to the pool or was closed),
// and the statement's rows affected and error. The transaction is open
// even when the statement failed: end it.
func beginWith(ctx context.Context, pool *sql.DB, query string, args []any) (*pgTx, int64, error, error) {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	var rows int64
	var stmtErr error
	beginErr := conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("unitofwork: the pool's connection is a %T, not pgx's", dc)
		}
		b := &pgx.Batch{}
		b.Queue("begin")
		b.Queue(query, args...)
		res := c.Conn().SendBatch(ctx, b)
		if _, err := res.Exec(); err != nil {
			_ = res.Close()
			return err
		}
		tag, err := res.Exec()
		rows, stmtErr = tag.RowsAffected(), err
		if err := res.Close(); err != nil && stmtErr == nil {
			stmtErr = err
		}
		return nil
	})
	if beginErr != nil {
		discard(conn)
		return nil, 0, nil, beginErr
	}
	return &pgTx{conn: conn}, rows, stmtErr, nil
}

// discard returns conn to the pool if it is idle and outside a
// transaction, and closes it otherwise.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok && !c.Conn().IsClosed() && c.Conn().PgConn().TxStatus() == 'I' {
			return nil
		}
		return driver.ErrBadConn // database/sql closes the connection
	})
	_ = conn.Close()
}

// pgTx is a transaction begun by beginWith. It is what *sql.Tx is to gorm:
// a connection pool that commits and rolls back, and does not begin.
type pgTx struct {
	ctx  context.Context // the unit's: COMMIT and ROLLBACK run on it
	conn *sql.Conn
	done bool
}

func (t *pgTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.conn.PrepareContext(ctx, query)
}

func (t *pgTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.conn.ExecContext(ctx, query, args...)
}

func (t *pgTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.conn.QueryContext(ctx, query, args...)
}

func (t *pgTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.conn.QueryRowContext(ctx, query, args...)
}

// Commit commits the transaction and gives the connection back. A COMMIT
// answered with ROLLBACK (a statement had failed) is an error.
func (t *pgTx) Commit() error {
	return t.finish("commit")
}

// Rollback rolls the transaction back and gives the connection back.
func (t *pgTx) Rollback() error {
	return t.finish("rollback")
}

func (t *pgTx) finish(verb string) error {
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	defer discard(t.conn)
	return t.conn.Raw(func(dc any) error {
		c := dc.(*stdlib.Conn).Conn()
		tag, err := c.Exec(t.ctx, verb)
		if err != nil {
			return err
		}
		if verb == "commit" && tag.String() == "ROLLBACK" {
			return errCommitRolledBack
		}
		return nil
	})
}

var _ gorm.TxCommitter = (*pgTx)(nil)

// beginWith begins u's transaction with query as its first statement (see
// beginWith above) and returns the statement's rows affected. Call with mu
// held.
func (u *unit) beginWith(ctx context.Context, pool *sql.DB, query string, args []any) (int64, error) {
	tx, rows, stmtErr, beginErr := beginWith(ctx, pool, query, args)
	if beginErr != nil {
		u.err = beginErr
		return 0, fmt.Errorf("unitofwork: begin: %w", beginErr)
	}
	tx.ctx = u.ctx
	u.conn = tx
	return rows, stmtErr
}

package pgdriver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// conn is pgx's connection whose transactions send BEGIN with their first
// statement; database/sql uses it from one goroutine at a time, so no
// lock. pgx's methods are promoted: sql.Conn.Raw callers get pgx's
// connection from Conn().
type conn struct {
	*stdConn
	pending   bool // a transaction began and its BEGIN is not sent yet
	pipelines bool // the statement mode can send BEGIN in a batch
	// aborted: the first statement failed before BEGIN ran (pgx prepares
	// first). As PostgreSQL would, what follows fails and COMMIT rolls back.
	aborted error
}

// stdConn is pgx's connection under a name that does not hide its Conn
// method (an embedded *stdlib.Conn would be a field named Conn).
type stdConn = stdlib.Conn

// errAborted is what a statement gets in a transaction whose first
// statement failed, as PostgreSQL answers in an aborted transaction.
var errAborted = errors.New("pgdriver: current transaction is aborted, commands ignored until end of transaction block")

// abortedErr is errAborted with the first statement's error.
func (c *conn) abortedErr() error {
	return fmt.Errorf("%w (its first statement failed: %v)", errAborted, c.aborted)
}

// BeginTx begins a transaction whose BEGIN goes with its first statement.
// A transaction with an isolation level or read-only begins as pgx's does.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if sql.IsolationLevel(opts.Isolation) != sql.LevelDefault || opts.ReadOnly {
		return c.stdConn.BeginTx(ctx, opts)
	}
	if c.stdConn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	c.pending, c.aborted = true, nil
	return &tx{c: c, ctx: ctx}, nil
}

// ExecContext runs query; the first in a transaction goes out with BEGIN.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.aborted != nil {
		return nil, c.abortedErr()
	}
	if !c.pending {
		return c.stdConn.ExecContext(ctx, query, args)
	}
	if !c.pipelines || !batchable(args) {
		if err := c.begin(ctx); err != nil {
			return nil, err
		}
		return c.stdConn.ExecContext(ctx, query, args)
	}
	pc := c.stdConn.Conn()
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(query, values(args)...)
	res := pc.SendBatch(ctx, b)
	_, err := res.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = res.Exec()
	}
	if closeErr := res.Close(); err == nil {
		err = closeErr
	}
	c.pending = false
	if err != nil {
		if !pc.IsClosed() && pc.PgConn().TxStatus() == 'I' {
			c.aborted = err // BEGIN did not run
		}
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn
		}
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

// QueryContext runs query, after the transaction's BEGIN if it is not
// sent yet.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	return c.stdConn.QueryContext(ctx, query, args)
}

// PrepareContext prepares query. Its statement runs through conn, so it
// begins a pending transaction (pgx's own would run outside it when reused
// in a transaction, as Tx.StmtContext and gorm's PrepareStmt do).
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.aborted != nil {
		return nil, c.abortedErr()
	}
	st, err := c.stdConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: st.(*stdlib.Stmt), c: c, query: query}, nil
}

// stmt is a prepared statement of conn. pgx names a prepared statement
// by its query, so conn's statements by query find and use it.
type stmt struct {
	*stdlib.Stmt
	c     *conn
	query string
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}

// ResetSession forgets a transaction's state before the pool hands the
// connection out again.
func (c *conn) ResetSession(ctx context.Context) error {
	c.pending, c.aborted = false, nil
	return c.stdConn.ResetSession(ctx)
}

// begin sends the transaction's BEGIN on its own if it is not sent yet.
func (c *conn) begin(ctx context.Context) error {
	if c.aborted != nil {
		return c.abortedErr()
	}
	if !c.pending {
		return nil
	}
	pc := c.stdConn.Conn()
	if _, err := pc.Exec(ctx, "begin"); err != nil {
		c.pending = !pc.IsClosed() && pc.PgConn().TxStatus() == 'I'
		if pgconn.SafeToRetry(err) {
			return driver.ErrBadConn
		}
		return fmt.Errorf("pgdriver: begin: %w", err)
	}
	c.pending = false
	return nil
}

// batchable reports whether a statement can go in pgx's batch as Exec
// would send it: with arguments (without, pgx uses the simple protocol,
// which allows several statements) and no pgx options among them.
func batchable(args []driver.NamedValue) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].Value.(type) {
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return false
	}
	return true
}

// values are database/sql's arguments as pgx takes them.
func values(args []driver.NamedValue) []any {
	vs := make([]any, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	return vs
}

package pgdriver

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// tx is a transaction of conn, ended as pgx's dbTx does: a COMMIT answered
// with ROLLBACK is pgx.ErrTxCommitRollback, and a connection whose COMMIT
// or ROLLBACK failed is closed, never handed out inside a transaction.
type tx struct {
	c   *conn
	ctx context.Context // BeginTx's, as pgx's database/sql transaction uses
}

func (t *tx) Commit() error {
	c := t.c
	defer func() { c.pending, c.aborted = false, nil }()
	switch {
	case c.pending:
		return nil // nothing was sent: nothing to commit
	case c.aborted != nil:
		return pgx.ErrTxCommitRollback
	}
	pc := c.Conn()
	tag, err := pc.Exec(t.ctx, "commit")
	if err != nil {
		if pc.PgConn().TxStatus() != 'I' {
			closeConn(pc)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *tx) Rollback() error {
	c := t.c
	defer func() { c.pending, c.aborted = false, nil }()
	if c.pending || c.aborted != nil {
		return nil // BEGIN never ran
	}
	pc := c.Conn()
	if _, err := pc.Exec(t.ctx, "rollback"); err != nil {
		closeConn(pc) // left in an unknown state
		return err
	}
	return nil
}

// closeConn closes pc; the pool then drops it (stdlib's ResetSession and
// IsValid see it closed).
func closeConn(pc *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = pc.Close(ctx)
}

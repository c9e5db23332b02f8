package sqlitedriver

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeConn is a connection whose COMMIT fails and whose ROLLBACK answers
// rollback.
type fakeConn struct {
	sqliteConn
	rollback error
}

type fakeTx struct{}

func (fakeTx) Commit() error   { return errors.New("SQLITE_FULL: database or disk is full") }
func (fakeTx) Rollback() error { return nil }

func (f *fakeConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return fakeTx{}, nil
}

func (f *fakeConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return nil, f.rollback
}

// TestWhatAFailedCommitLeaves: when SQLite already rolled back (the
// ROLLBACK finds no transaction) the connection stays in the pool; when
// the ROLLBACK fails otherwise it goes (IsValid false); either way the
// COMMIT's own error is returned, not driver.ErrBadConn, which the bus
// would take for a database out of reach.
func TestWhatAFailedCommitLeaves(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rollback error
		valid    bool
	}{
		{"rolled back by the ROLLBACK", nil, true},
		{"rolled back by SQLite already", errors.New("SQL logic error: cannot rollback - no transaction is active (1)"), true},
		{"the ROLLBACK failed", errors.New("disk I/O error"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{sqliteConn: &fakeConn{rollback: tc.rollback}}
			tx, err := c.BeginTx(context.Background(), driver.TxOptions{})
			require.NoError(t, err)
			err = tx.Commit()
			require.ErrorContains(t, err, "database or disk is full")
			require.NotErrorIs(t, err, driver.ErrBadConn)
			require.Equal(t, tc.valid, c.IsValid())
		})
	}
}

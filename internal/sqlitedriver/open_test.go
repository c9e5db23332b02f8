package sqlitedriver_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/sqlitedriver"
)

// TestAFailedCommitEndsTheTransaction: a COMMIT that fails on a deferred
// foreign key leaves SQLite's transaction open; through this driver the
// connection comes back to the pool without it, so the next transaction
// begins and sees none of the failed one's writes. Through glebarez's
// driver alone the next BEGIN failed with "cannot start a transaction
// within a transaction", and a plain read saw the failed writes.
func TestAFailedCommitEndsTheTransaction(t *testing.T) {
	db, err := sqlitedriver.Open(filepath.Join(t.TempDir(), "t.db") + "?_pragma=foreign_keys(1)")
	require.NoError(t, err)
	ctx := context.Background()
	deferredForeignKey(t, db)
	_, err = db.ExecContext(ctx, "CREATE TABLE effects (id TEXT NOT NULL)")
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO effects (id) VALUES ('failed')")
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO children (parent) VALUES ('none')")
	require.NoError(t, err, "deferred: checked at COMMIT")
	require.ErrorContains(t, tx.Commit(), "FOREIGN KEY constraint failed")

	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM effects").Scan(&n))
	require.Zero(t, n, "the failed transaction's write is gone")
	next, err := db.BeginTx(ctx, nil)
	require.NoError(t, err, "a transaction begins on the same connection")
	_, err = next.ExecContext(ctx, "INSERT INTO effects (id) VALUES ('next')")
	require.NoError(t, err)
	require.NoError(t, next.Commit())
	var ids []string
	rows, err := db.QueryContext(ctx, "SELECT id FROM effects")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"next"}, ids)
}

// TestWithoutTheFixTheTransactionStaysOpen pins the driver's behaviour the
// package works around: if glebarez/go-sqlite ever ends the transaction
// itself, this fails, and the package can go.
func TestWithoutTheFixTheTransactionStaysOpen(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db")+"?_pragma=foreign_keys(1)")
	require.NoError(t, err)
	ctx := context.Background()
	deferredForeignKey(t, db)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO children (parent) VALUES ('none')")
	require.NoError(t, err)
	require.Error(t, tx.Commit())
	_, err = db.BeginTx(ctx, nil)
	require.ErrorContains(t, err, "cannot start a transaction within a transaction")
}

// deferredForeignKey gives db one connection (the failed transaction's),
// closed when the test ends, and a table children whose foreign key SQLite
// checks only at COMMIT.
func deferredForeignKey(t *testing.T, db *sql.DB) {
	t.Helper()
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		"CREATE TABLE parents (id TEXT PRIMARY KEY)",
		"CREATE TABLE children (parent TEXT REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)",
	} {
		_, err := db.ExecContext(context.Background(), q)
		require.NoError(t, err)
	}
}

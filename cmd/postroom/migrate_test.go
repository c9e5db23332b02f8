package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := execute(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestMigrateAgainstPostgres(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	out, err := run(t, "migrate", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "migrate: applied versions [1]\n", out)
	out, err = run(t, "migrate", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "migrate: up to date\n", out)
}

func TestMigratePrintDoesNotConnect(t *testing.T) {
	out, err := run(t, "migrate", "--print", "--dsn", "mysql://root:pw@tcp(127.0.0.1:3306)/app", "--inbox-table", "app_inbox")
	require.NoError(t, err)
	require.Contains(t, out, "CREATE TABLE IF NOT EXISTS app_inbox (")
	require.Contains(t, out, "DATETIME(6)")
	require.Contains(t, out, "watermill_postroom_outbox", "the outbox's tables are part of the schema")
	require.Contains(t, out, "VARBINARY(200)", "key columns compare bytes exactly")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), ";"))
	require.Contains(t, out, "-- 1: postroom schema\n")
	require.NotContains(t, out, "-- 2:", "one version")
	require.NotContains(t, out, ";;", "one semicolon a statement")
}

func TestMigrateRefusesBadInput(t *testing.T) {
	_, err := run(t, "migrate", "--dsn", "")
	require.ErrorContains(t, err, "pass --dsn")
	_, err = run(t, "migrate", "--print", "--dsn", "x.db", "--inbox-table", "x;drop")
	require.ErrorContains(t, err, "bad table name")
}

// TestMigrateRefusesUnclearDSNs: a host name is not a SQLite file (it
// created one and reported success), a mistyped scheme says so, and the
// forms that work are listed; nothing is created.
func TestMigrateRefusesUnclearDSNs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, args := range [][]string{
		{"migrate", "--dsn", "db.prod.example.com"},
		{"migrate", "--print", "--dsn", "db.prod.example.com"},
		{"migrate", "--dsn", "postgress://app@db.prod.example.com/app"},
		{"inbox", "stats", "--dsn", "prod"},
	} {
		out, err := run(t, args...)
		require.ErrorIs(t, err, store.ErrBadDSN, args)
		require.ErrorContains(t, err, "sqlite:path", "the accepted forms are listed")
		require.NotContains(t, out, "applied")
	}
	_, err := run(t, "migrate", "--dsn", "postgress://app@db/app")
	require.ErrorContains(t, err, `unknown scheme "postgress"`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no SQLite file was created")

	out, err := run(t, "migrate", "--dsn", "sqlite:app.sqlite")
	require.NoError(t, err)
	require.Equal(t, "migrate: applied versions [1]\n", out)
	_, err = os.Stat("app.sqlite")
	require.NoError(t, err, "the file named with its scheme")
}

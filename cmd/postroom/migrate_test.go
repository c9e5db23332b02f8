package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

func TestMigrateAgainstPostgres(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	out, err := run(t, "migrate", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "migrate: applied versions [1 2 3 4 5 6]\n", out)
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
}

func TestMigrateRefusesBadInput(t *testing.T) {
	_, err := run(t, "migrate", "--dsn", "")
	require.ErrorContains(t, err, "pass --dsn")
	_, err = run(t, "migrate", "--print", "--dsn", "x.db", "--inbox-table", "x;drop")
	require.ErrorContains(t, err, "bad table name")
}

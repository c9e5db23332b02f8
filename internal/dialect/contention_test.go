package dialect_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

// TestExecContendedRunsAStatementThatLostAgain: on MariaDB a statement
// that waits for a row lock longer than innodb_lock_wait_timeout fails
// with error 1205 (contention); ExecContended runs it again, and it
// changes the row once the transaction holding it has ended. Without the
// second run the statement's error comes back.
func TestExecContendedRunsAStatementThatLostAgain(t *testing.T) {
	dsn := testenv.MySQLDatabaseDSN(t)
	holder, err := store.Open("mysql://" + dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(holder) })
	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")]
	impatient, err := store.Open("mysql://" + dsn + sep + "innodb_lock_wait_timeout=1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(impatient) })
	require.NoError(t, holder.Exec("CREATE TABLE leases (id INT PRIMARY KEY, n INT NOT NULL)").Error)
	require.NoError(t, holder.Exec("INSERT INTO leases (id, n) VALUES (1, 0)").Error)

	tx := holder.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, tx.Exec("UPDATE leases SET n = n + 10 WHERE id = 1").Error)
	// Without the retry: the lock wait times out.
	err = impatient.Exec("UPDATE leases SET n = n + 1 WHERE id = 1").Error
	var myErr *mysql.MySQLError
	require.ErrorAs(t, err, &myErr)
	require.EqualValues(t, 1205, myErr.Number)
	require.True(t, dialect.Contention(err))

	released := time.AfterFunc(1500*time.Millisecond, func() { tx.Commit() })
	defer released.Stop()
	changed, err := dialect.ExecContended(context.Background(), impatient, "UPDATE leases SET n = n + 1 WHERE id = 1")
	require.NoError(t, err, "run again after the lock wait timed out")
	require.EqualValues(t, 1, changed)
	var n int
	require.NoError(t, holder.Raw("SELECT n FROM leases WHERE id = 1").Row().Scan(&n))
	require.Equal(t, 11, n, "the holder's change and the statement's, once each")
}

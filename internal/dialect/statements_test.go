package dialect_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
	"github.com/postroom/postroom/internal/dialect/sqlite"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
)

// The statement contract suite: every statement of package dialect run
// against every database postroom supports, each checked for what its
// documentation promises. A database joins by one row of databases; a
// statement a database cannot run (the SQL transport's on SQLite) is
// declared in the test with t.Skip and its reason.
//
// Each test opens a database of its own (a PostgreSQL schema, a MariaDB
// database, a SQLite file), migrated by store.Migrate, and drops it at its
// end (internal/testenv). A server that is not reachable fails the test;
// only -short skips.

// database is one row of the suite's table.
type database struct {
	name    string
	dialect dialect.Dialect
	open    func(testing.TB) *gorm.DB // migrated, isolated, dropped at the end
	server  bool                      // watermill-sql has adapters for it (outbox, SQL transport)
}

var databases = []database{
	{name: "postgres", dialect: postgres.Dialect{}, open: testenv.Postgres, server: true},
	{name: "mariadb", dialect: mysql.Dialect{}, open: testenv.MySQL, server: true},
	{name: "sqlite", dialect: sqlite.Dialect{}, open: testenv.SQLite},
}

// env is one test's database.
type env struct {
	t      *testing.T
	d      dialect.Dialect
	db     *gorm.DB
	tables dialect.Tables
	server bool
}

// each runs test against every database, in parallel, each on a database
// of its own.
func each(t *testing.T, test func(t *testing.T, e *env)) {
	t.Helper()
	t.Parallel()
	for _, database := range databases {
		t.Run(database.name, func(t *testing.T) {
			t.Parallel()
			db := database.open(t)
			d, err := dialects.Of(db)
			require.NoError(t, err)
			require.Equal(t, database.dialect, d)
			test(t, &env{t: t, d: d, db: db, tables: dialect.Tables{}.WithDefaults(), server: database.server})
		})
	}
}

// eachServer is each on the databases watermill-sql has adapters for.
func eachServer(t *testing.T, test func(t *testing.T, e *env)) {
	t.Helper()
	each(t, func(t *testing.T, e *env) {
		if !e.server {
			t.Skipf("%s has no watermill-sql adapter: no outbox, no SQL transport", e.d)
		}
		test(t, e)
	})
}

// exec runs a statement on db (the env's pool, or a transaction) and
// returns the rows it changed.
func (e *env) exec(db *gorm.DB, query string, args ...any) int64 {
	e.t.Helper()
	res := db.Exec(query, args...)
	require.NoError(e.t, res.Error, "%s", query)
	return res.RowsAffected
}

// execNative runs a statement the way the middlewares do, with
// database/sql and the driver's own placeholders (Dialect.Native), and
// returns the rows it changed.
func (e *env) execNative(query string, args ...any) int64 {
	e.t.Helper()
	sqlDB, err := e.db.DB()
	require.NoError(e.t, err)
	res, err := sqlDB.ExecContext(context.Background(), e.d.Native(query), args...)
	require.NoError(e.t, err, "%s", query)
	n, err := res.RowsAffected()
	require.NoError(e.t, err)
	return n
}

// scan runs a query returning one row into dest.
func (e *env) scan(query string, args []any, dest ...any) {
	e.t.Helper()
	require.NoError(e.t, e.db.Raw(query, args...).Row().Scan(dest...), "%s", query)
}

// count returns an integer the query returns (COUNT(*) and the like).
func (e *env) count(query string, args ...any) int64 {
	e.t.Helper()
	var n int64
	e.scan(query, args, &n)
	return n
}

// tm binds t for a timestamp column.
func (e *env) tm(t time.Time) any { return e.d.Time(t) }

// parse reads a scanned timestamp column.
func (e *env) parse(v any) time.Time {
	e.t.Helper()
	t, err := e.d.ParseTime(v)
	require.NoError(e.t, err)
	return t
}

// begin starts a transaction on its own connection, rolled back at the
// end of the test unless the test ended it.
func (e *env) begin() *gorm.DB {
	e.t.Helper()
	tx := e.db.Begin()
	require.NoError(e.t, tx.Error)
	e.t.Cleanup(func() { tx.Rollback() })
	return tx
}

// rowsOf returns the strings of a one-column query, in order.
func (e *env) strings(query string, args ...any) []string {
	e.t.Helper()
	rows, err := e.db.Raw(query, args...).Rows()
	require.NoError(e.t, err, "%s", query)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s sql.RawBytes
		require.NoError(e.t, rows.Scan(&s))
		out = append(out, string(s))
	}
	require.NoError(e.t, rows.Err())
	return out
}

// t0 is the suite's "now": a fixed instant, with microseconds, away from
// any change of clocks.
var t0 = time.Date(2030, 3, 14, 15, 9, 26, 535897000, time.UTC)

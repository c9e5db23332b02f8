package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
)

// Defaults of the environment variables, for a local machine.
const (
	PostgresDSNDefault = "postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable"
	MySQLDSNDefault    = "root@tcp(127.0.0.1:3306)/postroom_test?parseTime=true"
	AMQPURLDefault     = "amqp://guest:guest@127.0.0.1:5672/"
)

// PostgresDSN is POSTROOM_POSTGRES_DSN or its default.
func PostgresDSN() string { return cmp.Or(os.Getenv("POSTROOM_POSTGRES_DSN"), PostgresDSNDefault) }

// MySQLDSN is POSTROOM_MYSQL_DSN or its default.
func MySQLDSN() string { return cmp.Or(os.Getenv("POSTROOM_MYSQL_DSN"), MySQLDSNDefault) }

// AMQPURL is POSTROOM_AMQP_URL or its default.
func AMQPURL() string { return cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), AMQPURLDefault) }

const startHint = "start the local services with `make services` (scripts/services.sh), or run `make test`"

// Name returns a short random name usable as a schema, database, topic or queue.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func skipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping the %s test", what)
	}
}

// PostgresSchemaDSN creates a fresh schema and returns a DSN whose
// search_path is that schema; the schema is dropped when the test ends.
func PostgresSchemaDSN(t testing.TB) string {
	t.Helper()
	skipShort(t, "PostgreSQL")
	admin := open(t, PostgresDSN(), "PostgreSQL")
	schema := Name("t_")
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		closeDB(admin)
	})
	u, err := url.Parse(PostgresDSN())
	if err != nil {
		t.Fatalf("testenv: POSTROOM_POSTGRES_DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

var mysqlDBName = regexp.MustCompile(`\)/([^?]*)`)

// MySQLDatabaseDSN creates a fresh database and returns its DSN; the
// database is dropped when the test ends.
func MySQLDatabaseDSN(t testing.TB) string {
	t.Helper()
	skipShort(t, "MariaDB")
	admin := open(t, MySQLDSN(), "MariaDB")
	name := Name("t_")
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE " + name)
		closeDB(admin)
	})
	return mysqlDBName.ReplaceAllString(MySQLDSN(), ")/"+name)
}

// SQLiteDSN returns the path of a new SQLite file in the test's temp dir.
func SQLiteDSN(t testing.TB) string {
	return filepath.Join(t.TempDir(), "postroom.db")
}

// Postgres returns a migrated database in a fresh PostgreSQL schema.
func Postgres(t testing.TB) *gorm.DB { return Migrated(t, PostgresSchemaDSN(t), "PostgreSQL") }

// MySQL returns a migrated fresh MariaDB/MySQL database.
func MySQL(t testing.TB) *gorm.DB { return Migrated(t, MySQLDatabaseDSN(t), "MariaDB") }

// SQLite returns a migrated SQLite database in a temp file.
func SQLite(t testing.TB) *gorm.DB { return Migrated(t, SQLiteDSN(t), "SQLite") }

// Migrated opens dsn, applies postroom's migrations and closes it at the end.
func Migrated(t testing.TB, dsn, what string) *gorm.DB {
	t.Helper()
	db := open(t, dsn, what)
	t.Cleanup(func() { closeDB(db) })
	if _, err := store.Migrate(context.Background(), db, store.Tables{}); err != nil {
		t.Fatalf("testenv: migrate %s: %v", what, err)
	}
	return db
}

// Databases lists the three stores by name, for table-driven tests.
var Databases = []struct {
	Name string
	Open func(testing.TB) *gorm.DB
}{
	{"postgres", Postgres},
	{"mariadb", MySQL},
	{"sqlite", SQLite},
}

// ServerDatabases lists the stores watermill-sql has adapters for (the
// outbox, the SQL transport): PostgreSQL and MariaDB.
var ServerDatabases = Databases[:2]

func open(t testing.TB, dsn, what string) *gorm.DB {
	t.Helper()
	db, err := store.Open(dsn)
	if err == nil {
		var sqlErr error
		if sqlDB, e := db.DB(); e != nil {
			sqlErr = e
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sqlErr = sqlDB.PingContext(ctx)
			cancel()
		}
		err = sqlErr
	}
	if err != nil {
		t.Fatalf("testenv: %s at %s is not reachable: %v\n%s", what, store.Redact(dsn), err, startHint)
	}
	return db
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// RequireAMQP returns the RabbitMQ URL after checking that it is reachable.
func RequireAMQP(t testing.TB) string {
	t.Helper()
	skipShort(t, "RabbitMQ")
	u, err := url.Parse(AMQPURL())
	if err != nil {
		t.Fatalf("testenv: POSTROOM_AMQP_URL: %v", err)
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":5672"
	}
	conn, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		t.Fatalf("testenv: RabbitMQ at %s is not reachable: %v\n%s", host, err, startHint)
	}
	_ = conn.Close()
	return AMQPURL()
}

// Logger returns a logger that writes to the test's log at warning level
// and above, so a failing test shows what the bus said.
// After the test's cleanups it writes to stderr, since a goroutine still
// draining may log after the test has ended.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if w.done.Load() {
		return os.Stderr.Write(p)
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

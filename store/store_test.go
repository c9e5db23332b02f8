package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(testing.TB) string
	}{
		{"postgres", testenv.PostgresSchemaDSN},
		{"mariadb", testenv.MySQLDatabaseDSN},
		{"sqlite", testenv.SQLiteDSN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := tc.dsn(t)
			var wg sync.WaitGroup
			applied := make(chan []int, 4)
			for range 4 { // four instances starting at once
				wg.Go(func() {
					db, err := store.Open(dsn)
					require.NoError(t, err)
					defer store.Close(db)
					versions, err := store.Migrate(context.Background(), db, store.Tables{})
					require.NoError(t, err)
					applied <- versions
				})
			}
			wg.Wait()
			close(applied)
			var all []int
			for v := range applied {
				all = append(all, v...)
			}
			require.ElementsMatch(t, []int{1}, all, "each version applied exactly once")

			db, err := store.Open(dsn)
			require.NoError(t, err)
			defer store.Close(db)
			versions, err := store.Migrate(context.Background(), db, store.Tables{})
			require.NoError(t, err)
			require.Empty(t, versions, "a second Migrate applies nothing")

			if tc.name == "sqlite" {
				return // its DDL commits with the version row: a step is never cut short
			}
			// A step cut short after its DDL committed (MySQL commits DDL
			// at once) runs again: the version row is written last.
			require.NoError(t, db.Exec("DELETE FROM postroom_migrations").Error)
			versions, err = store.Migrate(context.Background(), db, store.Tables{})
			require.NoError(t, err)
			require.Equal(t, []int{1}, versions)
		})
	}
}

// TestVersion1CreatesExactlyPostroomsTables: a fresh database migrated to
// version 1 has postroom's tables and indexes, and no other.
func TestVersion1CreatesExactlyPostroomsTables(t *testing.T) {
	common := []string{"postroom_delayed", "postroom_deliveries", "postroom_inbox", "postroom_migrations", "postroom_schedules", "postroom_stale_watermarks"}
	outbox := []string{"watermill_offsets_postroom_outbox", "watermill_postroom_outbox"}
	indexes := []string{"postroom_delayed_due_at", "postroom_deliveries_updated_at", "postroom_inbox_received_at", "postroom_stale_watermarks_updated_at"}
	for _, tc := range []struct {
		name                  string
		dsn                   func(testing.TB) string
		tables, indexes       string
		wantTables, wantIndex []string
	}{
		{"postgres", testenv.PostgresSchemaDSN,
			"SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
			"SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname NOT LIKE '%_pkey' ORDER BY 1",
			append(common, outbox...), indexes},
		{"mariadb", testenv.MySQLDatabaseDSN,
			"SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1",
			"SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name <> 'PRIMARY' ORDER BY 1",
			append(common, outbox...), append([]string{"postroom_outbox_acked"}, indexes...)},
		{"sqlite", testenv.SQLiteDSN,
			"SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1",
			"SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY 1",
			common, indexes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := store.Open(tc.dsn(t))
			require.NoError(t, err)
			defer store.Close(db)
			versions, err := store.Migrate(context.Background(), db, store.Tables{})
			require.NoError(t, err)
			require.Equal(t, []int{1}, versions)
			var tables, idx []string
			require.NoError(t, db.Raw(tc.tables).Scan(&tables).Error)
			require.Equal(t, tc.wantTables, tables)
			require.NoError(t, db.Raw(tc.indexes).Scan(&idx).Error)
			require.ElementsMatch(t, tc.wantIndex, idx)
			var recorded []string
			require.NoError(t, db.Raw("SELECT name FROM postroom_migrations ORDER BY version").Scan(&recorded).Error)
			require.Equal(t, []string{"postroom schema"}, recorded)
		})
	}
}

func TestBadTableNamesAreRefused(t *testing.T) {
	db, err := store.Open(":memory:")
	require.NoError(t, err)
	defer store.Close(db)
	_, err = store.Migrate(context.Background(), db, store.Tables{Inbox: "inbox; DROP TABLE users", Schedules: "1bad"})
	require.ErrorContains(t, err, `bad table name "inbox; DROP TABLE users"`)
	require.ErrorContains(t, err, `bad table name "1bad"`)
	_, err = store.Migrate(context.Background(), db, store.Tables{Inbox: "app.inbox"})
	require.Error(t, err, "SQLite has no schema app")
}

// TestANilDBIsAnError: a nil *gorm.DB given to the store, the scheduler's
// control or cleanup is an error, not a nil dereference (a panic in
// store.Migrate or the scheduler's control).
func TestANilDBIsAnError(t *testing.T) {
	_, err := store.Migrate(context.Background(), nil, store.Tables{})
	require.ErrorContains(t, err, "the *gorm.DB is nil")
	_, err = schedcontrol.New(nil, "")
	require.ErrorContains(t, err, "the *gorm.DB is nil")
	_, err = handlers.NewCleanup(handlers.CleanupConfig{DB: &gorm.DB{Config: &gorm.Config{}}})
	require.ErrorContains(t, err, "the *gorm.DB is nil")
	_, err = handlers.NewCleanup(handlers.CleanupConfig{DB: &gorm.DB{}})
	require.ErrorContains(t, err, "the *gorm.DB is nil", "a zero gorm.DB, not opened")
}

func TestPasswordsNeverShow(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://app:s3cret@db:5432/x":                              "postgres://app:xxxxx@db:5432/x",
		"postgres://app:s3%40cret@db:5432/x?sslmode=disable":           "postgres://app:xxxxx@db:5432/x?sslmode=disable",
		"postgres://app@db:5432/x?sslmode=disable&password=s3cret":     "postgres://app@db:5432/x?sslmode=disable&password=xxxxx",
		"postgresql://db/x?password=s3cret&sslmode=disable":            "postgresql://db/x?password=xxxxx&sslmode=disable",
		"host=db dbname=x user=app password=s3cret sslmode=disable":    "host=db dbname=x user=app password=xxxxx sslmode=disable",
		"host=db password = 's3 cret' dbname=x":                        "host=db password = xxxxx dbname=x",
		"mysql://app:s3cret@tcp(db:3306)/x":                            "mysql://app:xxxxx@tcp(db:3306)/x",
		"app:s3cret@tcp(db:3306)/x?parseTime=true":                     "app:xxxxx@tcp(db:3306)/x?parseTime=true",
		"app:s3c@r/et@tcp(db:3306)/x":                                  "app:xxxxx@tcp(db:3306)/x",
		"amqp://guest:s3cret@127.0.0.1:5672/":                          "amqp://guest:xxxxx@127.0.0.1:5672/",
		"postgres://app@db:5432/x":                                     "postgres://app@db:5432/x",
		"sqlite:/var/lib/app.db":                                       "sqlite:/var/lib/app.db",
		"host=db dbname=x user=app password=s3cret password=other-one": "host=db dbname=x user=app password=xxxxx password=xxxxx",
	} {
		require.Equal(t, want, store.Redact(dsn), dsn)
	}

	// Drivers' errors: nothing of the password, in any form.
	for _, dsn := range []string{
		"postgres://app:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2",
		"postgres://app@127.0.0.1:1/x?sslmode=disable&connect_timeout=2&password=s3cret",
		"host=127.0.0.1 port=1 dbname=x user=app password=s3cret connect_timeout=2",
		"app:s3cret@tcp(127.0.0.1:1)/x?timeout=2s",
		"postgress://app:s3cret@127.0.0.1:1/x",
	} {
		db, err := store.Open(dsn)
		if err == nil { // pgx connects lazily: the first query fails
			err = db.Exec("SELECT 1").Error
			store.Close(db)
			require.Error(t, err, dsn)
			err = errors.New(dsnparse.RedactText(err.Error(), dsn))
		}
		require.NotContains(t, err.Error(), "s3cret", dsn)
	}
}

// TestOnlyClearDSNsOpen: a DSN that is not clearly SQLite never becomes a
// new SQLite file; a mistyped scheme says so; every form Open documents is
// taken (PostgreSQL in its keyword form, MariaDB without a scheme, SQLite by
// scheme or extension).
func TestOnlyClearDSNsOpen(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, dsn := range []string{"db.prod.example.com", "prod", "app.db.bak", "  ", "postgress://app:s3cret@db/x", "mariadb://db/x", "sqlite3://x.db"} {
		_, err := store.Open(dsn)
		require.ErrorIs(t, err, store.ErrBadDSN, dsn)
		require.ErrorContains(t, err, "sqlite:path", "the error lists the forms: %q", dsn)
		require.NotContains(t, err.Error(), "s3cret")
	}
	_, err := store.Open("postgress://app@db/x")
	require.ErrorContains(t, err, `unknown scheme "postgress"`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no SQLite file was created")

	for _, dsn := range []string{"sqlite:a.db-file", "sqlite://b", "file:c?mode=rwc", "d.db", "e.SQLite", "f.sqlite3", ":memory:", "sqlite::memory:"} {
		db, err := store.Open(dsn)
		require.NoError(t, err, dsn)
		require.NoError(t, db.Exec("CREATE TABLE t (n INTEGER)").Error, dsn)
		require.NoError(t, store.Close(db))
	}

	t.Run("servers", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: the DSN forms of PostgreSQL and MariaDB connect to the servers")
		}
		pg, err := url.Parse(testenv.PostgresDSN())
		require.NoError(t, err)
		keywords := fmt.Sprintf("host=%s port=%s dbname=%s user=%s sslmode=disable", pg.Hostname(), pg.Port(), strings.TrimPrefix(pg.Path, "/"), pg.User.Username())
		if pw, ok := pg.User.Password(); ok {
			keywords += " password=" + pw
		}
		mysqlNoScheme := testenv.MySQLDSN()
		for _, tc := range []struct{ dsn, dialect string }{
			{keywords, "postgres"},
			{mysqlNoScheme, "mysql"},
			{"mysql://" + mysqlNoScheme, "mysql"},
		} {
			db, err := store.Open(tc.dsn)
			require.NoError(t, err, store.Redact(tc.dsn))
			require.NoError(t, db.Exec("SELECT 1").Error, store.Redact(tc.dsn))
			require.Equal(t, tc.dialect, db.Dialector.Name())
			require.NoError(t, store.Close(db))
		}
	})
}

// TestAMySQLAddressWithoutItsProtocolIsABadDSN: user@host:3306/db (no
// tcp(…)) is refused with the form to write, not the driver's "default
// addr for network '127.0.0.1:3306' unknown".
func TestAMySQLAddressWithoutItsProtocolIsABadDSN(t *testing.T) {
	for _, dsn := range []string{"mysql://root@127.0.0.1:3306/app", "mysql://app:s3cret@db.example.com:3306/app"} {
		_, err := store.Open(dsn)
		require.ErrorIs(t, err, store.ErrBadDSN, dsn)
		require.ErrorContains(t, err, "the MySQL address needs its protocol, as in user@tcp(host:3306)/db", dsn)
		require.NotContains(t, err.Error(), "s3cret")
	}
}

package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
			require.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6}, all, "each version applied exactly once")

			if tc.name == "sqlite" {
				return // its DDL commits with the version row: a step is never cut short
			}
			// A step cut short after its DDL committed (MySQL commits DDL
			// at once) runs again: the version row is written last.
			db, err := store.Open(dsn)
			require.NoError(t, err)
			defer store.Close(db)
			require.NoError(t, db.Exec("DELETE FROM postroom_migrations WHERE version >= 4").Error)
			versions, err := store.Migrate(context.Background(), db, store.Tables{})
			require.NoError(t, err)
			require.Equal(t, []int{4, 5, 6}, versions)
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

func TestPlanNamesTheDialect(t *testing.T) {
	pg, err := store.Plan("postgres://u@h/db", store.Tables{Inbox: "ops.inbox"})
	require.NoError(t, err)
	require.Contains(t, strings.Join(pg, "\n"), "CREATE TABLE IF NOT EXISTS ops.inbox")
	require.Contains(t, strings.Join(pg, "\n"), "USING BRIN")
	my, err := store.Plan("mysql://root@tcp(h:3306)/db", store.Tables{})
	require.NoError(t, err)
	require.Contains(t, strings.Join(my, "\n"), "DATETIME(6)")
}

func TestPasswordsNeverShow(t *testing.T) {
	require.Equal(t, "postgres://app:xxxxx@db:5432/x", store.Redact("postgres://app:s3cret@db:5432/x"))
	require.Equal(t, "mysql://app:xxxxx@tcp(db:3306)/x", store.Redact("mysql://app:s3cret@tcp(db:3306)/x"))
	require.Equal(t, "app:xxxxx@tcp(db:3306)/x", store.Redact("app:s3cret@tcp(db:3306)/x"))
	_, err := store.Open("postgres://app:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	_, err = store.Open("app:s3cret@tcp(127.0.0.1:1)/x?timeout=2s")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	_, err = store.Open("")
	require.ErrorIs(t, err, store.ErrBadDSN)
}

func TestStatsFindsTheOldestRowOfALargeInboxWithoutScanningIt(t *testing.T) {
	db := testenv.Postgres(t)
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	// 300,000 keys in time order, then the oldest one last, so it sits in
	// the table's last page, where a sample of the table rarely looks.
	require.NoError(t, db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		SELECT 'c', '', 'm' || g, 't', ?::timestamptz + g * interval '1 second' FROM generate_series(1, 300000) g`, base).Error)
	oldest := base.Add(-24 * time.Hour)
	require.NoError(t, db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		VALUES ('c', '', 'oldest', 't', ?)`, oldest).Error)
	require.NoError(t, db.Exec("VACUUM ANALYZE postroom_inbox").Error) // what autovacuum does: summarise the BRIN ranges, estimate the rows

	stats, err := store.Stats(context.Background(), db, store.Tables{})
	require.NoError(t, err)
	inbox := stats[0]
	require.Equal(t, "postroom_inbox", inbox.Table)
	require.GreaterOrEqual(t, inbox.Rows, int64(store.ExactCountBelow), "the estimate path, where the sample is used")
	require.True(t, oldest.Equal(inbox.Oldest), "oldest %s, got %s", oldest, inbox.Oldest)
}

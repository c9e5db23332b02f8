package dialect_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

// Time binds an instant in UTC with microseconds on every store: what is
// read back is the same instant, an instant bound from another zone finds
// it, and the column orders by instant (text on SQLite).
func TestStatementsTimeRoundTrips(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		zone := time.FixedZone("UTC+5", 5*3600)
		times := []time.Time{
			t0,
			t0.Add(-time.Microsecond),
			t0.Truncate(time.Second), // no fraction: its text must still sort before t0's
			t0.Add(999 * time.Nanosecond),
			time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC),
			time.Date(2030, 7, 1, 2, 30, 0, 0, zone), // summer, another zone
		}
		for i, at := range times {
			require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", fmt.Sprint(i), "Type", e.tm(at)))
		}
		for i, at := range times {
			var v any
			e.scan("SELECT received_at FROM "+e.tables.Inbox+" WHERE message_id = ?", []any{fmt.Sprint(i)}, &v)
			got := e.parse(v)
			require.Equal(t, time.UTC, got.Location(), "%d", i)
			require.True(t, at.Truncate(time.Microsecond).Equal(got), "%d: %s read back as %s", i, at, got)
			require.EqualValues(t, 1, e.count("SELECT COUNT(*) FROM "+e.tables.Inbox+" WHERE received_at = ? AND message_id = ?", e.tm(at.In(time.UTC)), fmt.Sprint(i)), "%d found by its instant", i)
		}
		require.Equal(t, []string{"4", "2", "1", "0", "3", "5"}, e.strings("SELECT message_id FROM "+e.tables.Inbox+" ORDER BY received_at, message_id"),
			"ordered by instant")
	})
}

// The migrations table: created idempotently, a version applied once.
func TestStatementsMigrationsTable(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		m, err := e.d.MigrationsTable("postroom_migrations_contract")
		require.NoError(t, err)
		e.exec(e.db, m.Create)
		e.exec(e.db, m.Create) // again: no error
		require.EqualValues(t, 0, e.count(m.Applied, 1))
		require.EqualValues(t, 1, e.exec(e.db, m.Record, 1, "inbox", e.tm(t0)))
		require.EqualValues(t, 1, e.count(m.Applied, 1))
		require.EqualValues(t, 0, e.count(m.Applied, 2))
		require.Error(t, e.db.Exec(m.Record, 1, "inbox", e.tm(t0)).Error, "a version is recorded once")

		applied, err := e.d.MigrationsTable(dialect.MigrationsTableDefault)
		require.NoError(t, err)
		for _, step := range e.d.Migrations(e.tables) {
			require.EqualValues(t, 1, e.count(applied.Applied, step.Version), "store.Migrate recorded version %d", step.Version)
		}
		_, err = e.d.MigrationsTable("bad name")
		require.ErrorIs(t, err, dialect.ErrBadIdentifier)
	})
}

// Migrations are numbered from 1 without a gap, each named and with
// statements, on every dialect: a new one is the next number.
func TestMigrationsAreNumberedFromOne(t *testing.T) {
	for _, d := range []dialect.Dialect{postgres.Dialect{}, mysql.Dialect{}, sqlite.Dialect{}} {
		steps := d.Migrations(dialect.Tables{})
		require.NotEmpty(t, steps, d)
		for i, m := range steps {
			require.Equal(t, i+1, m.Version, d)
			require.NotEmpty(t, m.Name, d)
			require.NotEmpty(t, m.Statements, d)
			for _, stmt := range m.Statements {
				require.NotEmpty(t, strings.TrimSpace(stmt), "%s: migration %d", d, m.Version)
			}
		}
	}
}

// MigrationLock serialises migrations: while one session holds it,
// another cannot take it.
func TestStatementsMigrationLock(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lock, unlock := e.d.MigrationLock()
		if e.d == (sqlite.Dialect{}) {
			require.Empty(t, lock+unlock, "SQLite has one writer")
			t.Skip("SQLite needs no migration lock")
		}
		ctx := context.Background()
		sqlDB, err := e.db.DB()
		require.NoError(t, err)
		holder, err := sqlDB.Conn(ctx)
		require.NoError(t, err)
		defer holder.Close()
		other, err := sqlDB.Conn(ctx)
		require.NoError(t, err)
		defer other.Close()

		var taken any
		require.NoError(t, holder.QueryRowContext(ctx, lock).Scan(&taken))
		try := map[dialect.Dialect]string{
			postgres.Dialect{}: "SELECT pg_try_advisory_lock(7436180)",
			mysql.Dialect{}:    "SELECT IS_FREE_LOCK('postroom_migrate')",
		}[e.d]
		var free bool
		require.NoError(t, other.QueryRowContext(ctx, try).Scan(&free))
		if free && e.d == (postgres.Dialect{}) { // taken by the try: give it back before the connection returns to the pool
			_, _ = other.ExecContext(ctx, unlock)
		}
		require.False(t, free, "held by the other session")
		var released bool
		require.NoError(t, holder.QueryRowContext(ctx, unlock).Scan(&released))
		require.True(t, released, "the holder releases it")
	})
}

// The stats queries: exact count, oldest time (NULL when empty), oldest
// at or below a time, and the planner's estimate where there is one.
func TestStatementsStats(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		qs, err := e.d.Stats(e.tables)
		require.NoError(t, err)
		require.Len(t, qs, 2)
		inbox, watermarks := qs[0], qs[1]
		require.Equal(t, e.tables.Inbox, inbox.Table)
		require.Equal(t, e.tables.Watermarks, watermarks.Table)

		var oldest any
		e.scan(inbox.Oldest, nil, &oldest)
		require.Nil(t, oldest, "an empty table has no oldest row")
		require.Equal(t, "", inbox.OldestSample(0))

		for i := range 10 {
			at := t0.Add(-time.Duration(i) * time.Minute)
			require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", fmt.Sprint(i), "Type", e.tm(at)))
			require.EqualValues(t, 1, e.exec(e.db, e.d.WatermarkUpsert(e.tables.Watermarks), "c", "Type", fmt.Sprint(i), 1, "m", e.tm(at)))
		}
		for _, q := range qs {
			require.EqualValues(t, 10, e.count(q.Count), q.Table)
			e.scan(q.Oldest, nil, &oldest)
			require.Equal(t, t0.Add(-9*time.Minute).Truncate(time.Microsecond), e.parse(oldest), q.Table)
			e.scan(q.OldestBelow, []any{e.tm(t0.Add(-9 * time.Minute))}, &oldest)
			require.Equal(t, t0.Add(-9*time.Minute).Truncate(time.Microsecond), e.parse(oldest), "at or below")
			e.scan(q.OldestBelow, []any{e.tm(t0.Add(-10 * time.Minute))}, &oldest)
			require.Nil(t, oldest, "none below")
			if q.Estimate == "" {
				require.Equal(t, sqlite.Dialect{}, e.d, "only SQLite keeps no estimate")
				continue
			}
			require.GreaterOrEqual(t, e.count(q.Estimate, q.EstimateArgs...), int64(-1))
		}
		if e.d == (postgres.Dialect{}) {
			sample := inbox.OldestSample(10)
			require.NotEmpty(t, sample, "the inbox's time index is BRIN on PostgreSQL")
			e.scan(sample, nil, &oldest)
			require.Equal(t, t0.Add(-9*time.Minute).Truncate(time.Microsecond), e.parse(oldest), "a sample of 100%% is the table")
			require.Empty(t, watermarks.OldestSample(10))
		} else {
			require.Empty(t, inbox.OldestSample(10))
		}
	})
}

// The console's inbox queries: the summary per consumer, the lookup of a
// message ID, the activity per time bucket.
func TestStatementsInboxConsoleQueries(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		insert := e.d.InboxInsert(e.tables.Inbox)
		require.EqualValues(t, 1, e.exec(e.db, insert, "b", "s2", "m", "Type", e.tm(t0)))
		require.EqualValues(t, 1, e.exec(e.db, insert, "b", "s1", "m", "Type", e.tm(t0.Add(time.Minute))))
		require.EqualValues(t, 1, e.exec(e.db, insert, "B", "s", "m", "Type", e.tm(t0.Add(-time.Hour))))
		require.EqualValues(t, 1, e.exec(e.db, insert, "a", "s", "M", "Type", e.tm(t0)))
		require.EqualValues(t, 1, e.exec(e.db, e.d.ClaimInsert(e.tables.Inbox), "a", "s", "m", "Type", e.tm(t0), e.tm(t0), "", nil))
		e.exec(e.db, e.d.InboxCountDuplicate(e.tables.Inbox), "b", "s1", "m")
		e.exec(e.db, e.d.InboxCountDuplicate(e.tables.Inbox), "b", "s2", "m")

		summary, err := dialect.InboxSummary(e.tables.Inbox)
		require.NoError(t, err)
		rows, err := e.db.Raw(summary).Rows()
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var consumer string
			var n, dups int64
			var oldest any
			require.NoError(t, rows.Scan(&consumer, &n, &oldest, &dups))
			got = append(got, fmt.Sprintf("%s %d %s %d", consumer, n, e.parse(oldest).Format(time.TimeOnly), dups))
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, []string{"B 1 14:09:26 0", "a 2 15:09:26 0", "b 2 15:09:26 2"}, got, "per consumer, by consumer as bytes")

		lookup, err := dialect.InboxLookup(e.tables.Inbox)
		require.NoError(t, err)
		look := func(consumer string, limit int) []string {
			rows, err := e.db.Raw(lookup, "m", consumer, consumer, limit).Rows()
			require.NoError(t, err)
			defer rows.Close()
			var out []string
			for rows.Next() {
				var c, source, id, typ, status string
				var received any
				var dups int
				require.NoError(t, rows.Scan(&c, &source, &id, &typ, &received, &status, &dups))
				out = append(out, c+"/"+source+"/"+status)
			}
			require.NoError(t, rows.Err())
			return out
		}
		require.Equal(t, []string{"B/s/done", "a/s/processing", "b/s1/done", "b/s2/done"}, look("", 10), "every consumer of the ID, by consumer and source")
		require.Equal(t, []string{"b/s1/done", "b/s2/done"}, look("b", 10))
		require.Equal(t, []string{"B/s/done"}, look("", 1))

		activity, err := e.d.InboxActivity(e.tables.Inbox)
		require.NoError(t, err)
		rows, err = e.db.Raw(activity, 60, e.tm(t0.Add(-time.Minute))).Rows()
		require.NoError(t, err)
		defer rows.Close()
		buckets := map[string]int64{}
		for rows.Next() {
			var consumer string
			var bucket, n int64
			require.NoError(t, rows.Scan(&consumer, &bucket, &n))
			buckets[fmt.Sprint(consumer, " ", bucket)] = n
		}
		require.NoError(t, rows.Err())
		b0 := t0.Unix() / 60
		require.Equal(t, map[string]int64{
			fmt.Sprint("a ", b0):   1, // M; m is processing, not done
			fmt.Sprint("b ", b0):   1,
			fmt.Sprint("b ", b0+1): 1,
		}, buckets, "keys done since the time, per consumer and bucket of 60 s")
	})
}

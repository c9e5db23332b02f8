package dialect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

func (e *env) delayed() dialect.DelayedStatements {
	e.t.Helper()
	s, err := e.d.Delayed(dialect.DelayedTableDefault)
	require.NoError(e.t, err)
	return s
}

// delay inserts a delayed message and returns its id.
func (e *env) delay(s dialect.DelayedStatements, id, group string, due time.Time) int64 {
	e.t.Helper()
	require.EqualValues(e.t, 1, e.exec(e.db, s.Insert, e.tm(due), "topic-"+id, group, id, []byte("payload-"+id), `{"k":"`+id+`"}`, e.tm(t0)))
	return e.count("SELECT id FROM "+dialect.DelayedTableDefault+" WHERE message_id = ?", id)
}

// dueRow is a row of Due, scanned by gorm as the bus scans it.
type dueRow struct {
	ID          int64
	Topic       string
	TargetGroup string
	MessageID   string
	Payload     []byte
	Metadata    string
}

func (e *env) due(db *gorm.DB, s dialect.DelayedStatements, now time.Time, groups []string, limit int) []string {
	e.t.Helper()
	var rows []dueRow
	require.NoError(e.t, db.Raw(s.Due, e.tm(now), groups, limit).Scan(&rows).Error)
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.MessageID)
	}
	return ids
}

func TestStatementsDelayedDueSelectsWhatIsDue(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.delayed()
		reach := dialect.DelayedByReach("amqp://broker/")
		e.delay(s, "later", reach, t0.Add(time.Second))
		e.delay(s, "b", reach, t0.Add(-time.Minute))
		e.delay(s, "a", reach, t0.Add(-time.Hour))
		e.delay(s, "now", reach, t0)
		e.delay(s, "legacy", "", t0.Add(-time.Minute)) // same due time as b, inserted after it
		e.delay(s, "retry", "billing/Handler", t0.Add(-2*time.Hour))
		e.delay(s, "elsewhere", dialect.DelayedByReach("amqp://other/"), t0.Add(-3*time.Hour))
		e.delay(s, "endpoint", dialect.DelayedByEndpoint("billing"), t0.Add(-3*time.Hour))

		groups := []string{"", reach, "billing/Handler"}
		require.Equal(t, []string{"retry", "a", "b", "legacy", "now"}, e.due(e.db, s, t0, groups, 10),
			"due at or before now, for these groups, oldest due first, then by id")
		require.Equal(t, []string{"retry", "a"}, e.due(e.db, s, t0, groups, 2), "up to the limit")
		require.Equal(t, []string{"a", "b", "now"}, e.due(e.db, s, t0, []string{reach}, 10))
		require.Equal(t, []string{"endpoint"}, e.due(e.db, s, t0, []string{dialect.DelayedByEndpoint("billing")}, 10))

		var rows []dueRow
		require.NoError(t, e.db.Raw(s.Due, e.tm(t0), []string{"billing/Handler"}, 1).Scan(&rows).Error)
		require.Len(t, rows, 1)
		require.Equal(t, dueRow{ID: rows[0].ID, Topic: "topic-retry", TargetGroup: "billing/Handler", MessageID: "retry",
			Payload: []byte("payload-retry"), Metadata: `{"k":"retry"}`}, rows[0])
	})
}

// Due locks the rows it returns for its transaction, and another
// transaction's Due skips them instead of waiting (SQLite has one writer).
func TestStatementsDelayedDueSkipsLockedRows(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.d == (sqlite.Dialect{}) {
			t.Skip("SQLite has one writer: nothing to skip")
		}
		s := e.delayed()
		for i, id := range []string{"1", "2", "3", "4"} {
			e.delay(s, id, "", t0.Add(time.Duration(i)*time.Second))
		}
		first := e.begin()
		require.Equal(t, []string{"1", "2"}, e.due(first, s, t0.Add(time.Hour), []string{""}, 2))
		second := e.begin()
		require.Equal(t, []string{"3", "4"}, e.due(second, s, t0.Add(time.Hour), []string{""}, 10), "the first's rows are skipped")
		require.NoError(t, second.Rollback().Error)
		require.NoError(t, first.Rollback().Error)
		require.Equal(t, []string{"1", "2", "3", "4"}, e.due(e.db, s, t0.Add(time.Hour), []string{""}, 10))
	})
}

// Claim, Renew, Settle and Reschedule: a delayed retry's lease, each
// later step only while the lease is still the one it holds.
func TestStatementsDelayedLease(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.delayed()
		id := e.delay(s, "retry", "h", t0.Add(-time.Minute))
		other := e.delay(s, "other", "h", t0.Add(-time.Minute))
		lease := t0.Add(time.Minute)
		require.EqualValues(t, 1, e.exec(e.db, s.Claim, e.tm(lease), id))
		require.Equal(t, []string{"other"}, e.due(e.db, s, t0, []string{"h"}, 10), "claimed: not due until its lease ends")

		renewed := t0.Add(5 * time.Minute)
		require.EqualValues(t, 0, e.exec(e.db, s.Renew, e.tm(renewed), id, e.tm(lease.Add(time.Microsecond))), "not its lease")
		require.EqualValues(t, 1, e.exec(e.db, s.Renew, e.tm(renewed), id, e.tm(lease)))
		require.EqualValues(t, 0, e.exec(e.db, s.Renew, e.tm(renewed), id, e.tm(lease)), "the old lease is gone")

		require.EqualValues(t, 0, e.exec(e.db, s.Reschedule, e.tm(t0.Add(time.Hour)), `{"attempt":"2"}`, id, e.tm(lease)), "an old lease")
		require.EqualValues(t, 1, e.exec(e.db, s.Reschedule, e.tm(t0.Add(time.Hour)), `{"attempt":"2"}`, id, e.tm(renewed)))
		var md string
		e.scan("SELECT metadata FROM "+dialect.DelayedTableDefault+" WHERE id = ?", []any{id}, &md)
		require.Equal(t, `{"attempt":"2"}`, md)
		require.Equal(t, []string{"other"}, e.due(e.db, s, t0.Add(time.Hour-time.Microsecond), []string{"h"}, 10), "not due before its next time")
		require.Equal(t, []string{"other", "retry"}, e.due(e.db, s, t0.Add(time.Hour), []string{"h"}, 10), "due at its next time")

		require.EqualValues(t, 0, e.exec(e.db, s.Settle, id, e.tm(renewed)), "not its lease any more")
		require.EqualValues(t, 1, e.exec(e.db, s.Settle, id, e.tm(t0.Add(time.Hour))))
		require.EqualValues(t, 0, e.count("SELECT COUNT(*) FROM "+dialect.DelayedTableDefault+" WHERE id = ?", id))

		require.EqualValues(t, 1, e.exec(e.db, s.Delete, other))
		require.EqualValues(t, 0, e.exec(e.db, s.Delete, other))
		require.EqualValues(t, 0, e.count("SELECT COUNT(*) FROM "+dialect.DelayedTableDefault))
	})
}

func TestStatementsDelayedSummaryAndList(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.delayed()
		var n int64
		var next any
		e.scan(s.Summary, nil, &n, &next)
		require.Zero(t, n)
		require.Nil(t, next, "no due time without messages")

		e.delay(s, "b", "", t0.Add(time.Hour))
		e.delay(s, "a", "", t0.Add(time.Minute))
		e.delay(s, "c", "", t0.Add(time.Hour))
		e.scan(s.Summary, nil, &n, &next)
		require.EqualValues(t, 3, n)
		require.Equal(t, t0.Add(time.Minute).Truncate(time.Microsecond), e.parse(next))

		rows, err := e.db.Raw(s.List, 2).Rows()
		require.NoError(t, err)
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id int64
			var due, created any
			var topic, group, messageID string
			require.NoError(t, rows.Scan(&id, &due, &topic, &group, &messageID, &created))
			require.Equal(t, t0.Truncate(time.Microsecond), e.parse(created))
			ids = append(ids, messageID)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"a", "b"}, ids, "earliest due first, then by id, up to the limit")
	})
}

// Stranded counts, per group, the deliveries other buses publish (a reach
// or an endpoint, not a handler's retry) due at or before a time, leaving
// some groups out.
func TestStatementsDelayedStranded(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.delayed()
		mine, theirs, endpoint := dialect.DelayedByReach("amqp://mine/"), dialect.DelayedByReach("amqp://theirs/"), dialect.DelayedByEndpoint("billing")
		e.delay(s, "1", theirs, t0.Add(-time.Hour))
		e.delay(s, "2", theirs, t0.Add(-time.Minute))
		e.delay(s, "3", theirs, t0.Add(time.Minute)) // not due yet
		e.delay(s, "4", endpoint, t0)
		e.delay(s, "5", mine, t0.Add(-time.Hour))
		e.delay(s, "6", "billing/Handler", t0.Add(-time.Hour)) // a delayed retry
		e.delay(s, "7", "", t0.Add(-time.Hour))                // any bus publishes it

		rows, err := e.db.Raw(s.Stranded, e.tm(t0), []string{mine}).Rows()
		require.NoError(t, err)
		defer rows.Close()
		type stranded struct {
			n      int64
			oldest time.Time
		}
		got := map[string]stranded{}
		for rows.Next() {
			var group string
			var st stranded
			var oldest any
			require.NoError(t, rows.Scan(&group, &st.n, &oldest))
			st.oldest = e.parse(oldest)
			got[group] = st
		}
		require.NoError(t, rows.Err())
		require.Equal(t, map[string]stranded{
			theirs:   {2, t0.Add(-time.Hour).Truncate(time.Microsecond)},
			endpoint: {1, t0.Truncate(time.Microsecond)},
		}, got)
	})
}

// A reach too long for the target_group column is hashed; the group
// fits, and Due finds it.
func TestStatementsDelayedLongReachFits(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.delayed()
		reach := dialect.DelayedByReach("amqp://" + strings.Repeat("h", 300) + "/")
		require.LessOrEqual(t, len(reach), 255)
		require.Equal(t, reach, dialect.DelayedByReach("amqp://"+strings.Repeat("h", 300)+"/"), "the same for every bus")
		e.delay(s, "m", reach, t0)
		require.Equal(t, []string{"m"}, e.due(e.db, s, t0, []string{reach}, 10))
		relay, ok := dialect.DelayedRelay(reach)
		require.True(t, ok)
		require.True(t, strings.HasPrefix(relay, "transport sha256:"), relay)
	})
}

package dialect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
)

func (e *env) cleanup(outboxTopic string) dialect.CleanupStatements {
	e.t.Helper()
	c, err := e.d.Cleanup(e.tables, outboxTopic)
	require.NoError(e.t, err)
	return c
}

// purge runs a target's Delete batch by batch, as CleanupStore does, until
// a batch deletes nothing, and returns each batch's count.
func (e *env) purge(p dialect.PurgeTarget, limit int, args ...any) []int64 {
	e.t.Helper()
	var batches []int64
	for {
		n := e.exec(e.db, p.Delete, append(append([]any{}, args...), limit)...)
		batches = append(batches, n)
		if n == 0 {
			return batches
		}
		require.LessOrEqual(e.t, n, int64(limit), "a batch deletes at most its limit")
		require.Less(e.t, len(batches), 100, "the purge ends")
	}
}

// The inbox purge deletes the keys received before the cut-off, except a
// claim processing under a live lease and a parked one, in batches of at
// most the limit.
func TestStatementsPurgeInbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := e.cleanup("")
		now, cutoff := t0, t0.Add(-time.Hour)
		old, recent := cutoff.Add(-time.Microsecond), cutoff
		for i := range 5 {
			require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", fmt.Sprint("old-", i), "Type", e.tm(old)))
		}
		require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", "at-cutoff", "Type", e.tm(recent)))
		claim := e.d.ClaimInsert(e.tables.Inbox)
		move := e.d.ClaimMove(e.tables.Inbox)
		require.EqualValues(t, 1, e.exec(e.db, claim, "c", "s", "expired-lease", "Type", e.tm(old), e.tm(now.Add(-time.Second)), "", nil))
		require.EqualValues(t, 1, e.exec(e.db, claim, "c", "s", "live-lease", "Type", e.tm(old), e.tm(now.Add(time.Second)), "", nil))
		require.EqualValues(t, 1, e.exec(e.db, claim, "c", "s", "parked", "Type", e.tm(old.Add(-24*time.Hour)), e.tm(old), "", nil))
		require.EqualValues(t, 1, e.exec(e.db, move, dialect.StatusParked, nil, "c", "s", "parked", 1, dialect.StatusProcessing, dialect.StatusProcessing))
		require.EqualValues(t, 1, e.exec(e.db, claim, "c", "s", "released", "Type", e.tm(old), e.tm(old), "", nil))
		require.EqualValues(t, 1, e.exec(e.db, move, dialect.StatusReleased, nil, "c", "s", "released", 1, dialect.StatusProcessing, dialect.StatusProcessing))

		require.EqualValues(t, 7, e.count(c.Inbox.Count, e.tm(cutoff), e.tm(now)), "5 old keys, an expired lease, a released key")
		require.Equal(t, []int64{3, 3, 1, 0}, e.purge(c.Inbox, 3, e.tm(cutoff), e.tm(now)))
		require.EqualValues(t, 0, e.count(c.Inbox.Count, e.tm(cutoff), e.tm(now)))
		require.Equal(t, []string{"at-cutoff", "live-lease", "parked"}, e.strings("SELECT message_id FROM "+e.tables.Inbox+" ORDER BY message_id"))
	})
}

// The ...Of targets narrow a purge to the consumers whose names start
// with a prefix, compared as bytes ('_' is no wildcard).
func TestStatementsPurgeOfAConsumerPrefix(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := e.cleanup("")
		now, cutoff := t0, t0.Add(-time.Hour)
		old := cutoff.Add(-time.Second)
		consumers := []string{"a_b/H", "a_b/G", "axb/H", "A_B/H", "a_b", "x/a_b/H"}
		deliveries, err := e.d.Deliveries(dialect.DeliveriesTableDefault)
		require.NoError(t, err)
		for _, consumer := range consumers {
			require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), consumer, "s", "m", "Type", e.tm(old)))
			require.EqualValues(t, 1, e.exec(e.db, e.d.WatermarkUpsert(e.tables.Watermarks), consumer, "Type", "e", 1, "m", e.tm(old)))
			e.exec(e.db, deliveries.Count, consumer, "m", e.tm(old))
		}
		p := "a_b/"
		require.EqualValues(t, 2, e.count(c.InboxOf.Count, e.tm(cutoff), e.tm(now), len(p), p))
		require.EqualValues(t, 2, e.count(c.WatermarksOf.Count, e.tm(cutoff), len(p), p))
		require.EqualValues(t, 2, e.count(c.DeliveriesOf.Count, e.tm(cutoff), len(p), p))
		require.Equal(t, []int64{1, 1, 0}, e.purge(c.InboxOf, 1, e.tm(cutoff), e.tm(now), len(p), p))
		require.Equal(t, []int64{2, 0}, e.purge(c.WatermarksOf, 10, e.tm(cutoff), len(p), p))
		require.Equal(t, []int64{2, 0}, e.purge(c.DeliveriesOf, 10, e.tm(cutoff), len(p), p))
		left := []string{"A_B/H", "a_b", "axb/H", "x/a_b/H"}
		require.Equal(t, left, e.strings("SELECT consumer FROM "+e.tables.Inbox+" ORDER BY consumer"))
		require.Equal(t, left, e.strings("SELECT consumer FROM "+e.tables.Watermarks+" ORDER BY consumer"))
		require.Equal(t, left, e.strings("SELECT consumer FROM "+dialect.DeliveriesTableDefault+" ORDER BY consumer"))
	})
}

// Watermarks and redelivery counts go when they were updated before the
// cut-off.
func TestStatementsPurgeWatermarksAndDeliveries(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := e.cleanup("")
		cutoff := t0.Add(-time.Hour)
		deliveries, err := e.d.Deliveries(dialect.DeliveriesTableDefault)
		require.NoError(t, err)
		for i := range 12 {
			at := cutoff.Add(-time.Duration(i+1) * time.Microsecond)
			if i%4 == 0 {
				at = cutoff // not before the cut-off
			}
			require.EqualValues(t, 1, e.exec(e.db, e.d.WatermarkUpsert(e.tables.Watermarks), "c", "Type", fmt.Sprint("e", i), 1, "m", e.tm(at)))
			e.exec(e.db, deliveries.Count, "c", fmt.Sprint("m", i), e.tm(at))
		}
		require.EqualValues(t, 9, e.count(c.Watermarks.Count, e.tm(cutoff)))
		require.EqualValues(t, 9, e.count(c.Deliveries.Count, e.tm(cutoff)))
		require.Equal(t, []int64{4, 4, 1, 0}, e.purge(c.Watermarks, 4, e.tm(cutoff)))
		require.Equal(t, []int64{5, 4, 0}, e.purge(c.Deliveries, 5, e.tm(cutoff)))
		require.EqualValues(t, 3, e.count("SELECT COUNT(*) FROM "+e.tables.Watermarks))
		require.EqualValues(t, 3, e.count("SELECT COUNT(*) FROM "+dialect.DeliveriesTableDefault))
	})
}

// The outbox purge deletes the messages the relay has published and that
// are older than an age, by the database's clock; OutboxBacklog counts
// the ones not published yet. SQLite has no outbox.
func TestStatementsPurgeOutbox(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if !e.server {
			_, err := e.d.Cleanup(e.tables, dialect.OutboxTopicDefault)
			require.ErrorIs(t, err, dialect.ErrUnsupported)
			t.Skip("SQLite has no outbox")
		}
		c := e.cleanup(dialect.OutboxTopicDefault)
		require.NoError(t, e.db.Exec(e.d.OutboxTablesExist(dialect.OutboxTopicDefault)).Error, "migrated")
		table := c.Outbox.Table
		insert := "INSERT INTO " + table + " (uuid, payload, metadata) VALUES (?, ?, '{}')"
		if e.d == (postgres.Dialect{}) {
			insert = "INSERT INTO " + table + " (uuid, payload, metadata, transaction_id) VALUES (?, ?, '{}', pg_current_xact_id())"
		}
		for _, id := range []string{"recent-relayed", "old-relayed", "old-waiting"} {
			require.EqualValues(t, 1, e.exec(e.db, insert, id, []byte(id)))
		}
		backdate := "UPDATE " + table + " SET created_at = created_at - INTERVAL '1 hour' WHERE uuid <> 'recent-relayed'"
		if e.d == (mysql.Dialect{}) {
			backdate = "UPDATE " + table + " SET created_at = created_at - INTERVAL 1 HOUR WHERE uuid <> 'recent-relayed'"
		}
		e.exec(e.db, backdate)
		// The relay published the first two.
		switch e.d {
		case postgres.Dialect{}:
			e.exec(e.db, `INSERT INTO "watermill_offsets_postroom_outbox"`+" (consumer_group, offset_acked, last_processed_transaction_id)"+
				" SELECT ?, \"offset\", transaction_id FROM "+table+" WHERE uuid = 'old-relayed'", dialect.OutboxRelayGroup)
		case mysql.Dialect{}:
			e.exec(e.db, "UPDATE "+table+" SET `acked` = TRUE WHERE uuid <> 'old-waiting'")
		}
		backlog, args := e.d.OutboxBacklog(dialect.OutboxTopicDefault)
		var waiting int64
		var age float64
		e.scan(backlog, args, &waiting, &age)
		require.EqualValues(t, 1, waiting)
		require.InDelta(t, 3600, age, 120, "the oldest waits an hour")

		require.EqualValues(t, 1, e.count(c.Outbox.Count, 60))
		require.Equal(t, []int64{1, 0}, e.purge(c.Outbox, 10, 60))
		require.Equal(t, []string{"old-waiting", "recent-relayed"}, e.strings("SELECT uuid FROM "+table+" ORDER BY uuid"))
	})
}

package dialect_test

import (
	"fmt"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
)

// topicTables creates a watermill-sql topic's message and offsets tables
// as the SQL transport does, and returns a function that publishes a
// message to it.
func (e *env) topicTables(topic string) (messages string, publish func(id string)) {
	e.t.Helper()
	schema, offsets, err := e.d.MessageSchema(1)
	require.NoError(e.t, err)
	qs, err := schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	require.NoError(e.t, err)
	oqs, err := offsets.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	require.NoError(e.t, err)
	for _, q := range append(qs, oqs...) {
		e.exec(e.db, q.Query, q.Args...)
	}
	messages = map[dialect.Dialect]string{postgres.Dialect{}: `"watermill_` + topic + `"`, mysql.Dialect{}: "`watermill_" + topic + "`"}[e.d]
	insert := "INSERT INTO " + messages + " (uuid, payload, metadata) VALUES (?, ?, '{}')"
	if e.d == (postgres.Dialect{}) {
		insert = "INSERT INTO " + messages + " (uuid, payload, metadata, transaction_id) VALUES (?, ?, '{}', pg_current_xact_id())"
	}
	return messages, func(id string) { e.exec(e.db, insert, id, []byte(id)) }
}

// GroupStarts gives an event topic's new group its offsets row at the
// end of the topic, a command topic's at its start, and leaves a row that
// exists; groups compare bytes.
func TestStatementsGroupStarts(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		messages, publish := e.topicTables("orders")
		publish("1")
		publish("2")
		q := e.d.GroupStarts("orders")
		offsets := map[dialect.Dialect]string{postgres.Dialect{}: `"watermill_offsets_orders"`, mysql.Dialect{}: "`watermill_offsets_orders`"}[e.d]
		unread := func(group string) int64 {
			if e.d == (postgres.Dialect{}) {
				return e.count(`SELECT COUNT(*) FROM `+messages+` m, `+offsets+` o WHERE o.consumer_group = ?`+
					` AND (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked)`, group)
			}
			return e.count("SELECT COUNT(*) FROM "+messages+" m, "+offsets+" o WHERE o.consumer_group = ? AND m.`offset` > o.offset_acked", group)
		}
		exists := func(group string) bool {
			var rows []int
			require.NoError(t, e.db.Raw(q.Exists, group).Scan(&rows).Error)
			return len(rows) > 0
		}
		atEnd := func(group string) {
			if q.End == "" {
				e.exec(e.db, q.Insert, group)
				return
			}
			end := e.count(q.End)
			e.exec(e.db, q.Insert, group, end, end)
		}

		require.False(t, exists("audit"))
		var oldest int64 // PostgreSQL: the oldest transaction running before the group starts
		if e.d == (postgres.Dialect{}) {
			e.scan("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint", nil, &oldest)
		}
		atEnd("audit")
		require.True(t, exists("audit"))
		if e.d == (postgres.Dialect{}) {
			// The group starts at the oldest transaction still running, so
			// that a message whose transaction commits later is not
			// skipped: what was committed before that transaction began is
			// not read. Another test's open transaction on the server moves
			// that point back, so the count of unread messages is exact
			// only on an idle server; the start is checked instead.
			var start int64
			e.scan(`SELECT last_processed_transaction_id::text::bigint FROM `+offsets+` WHERE consumer_group = ?`, []any{"audit"}, &start)
			require.GreaterOrEqual(t, start, oldest, "an event topic's new group starts after what was committed before the oldest running transaction")
		} else {
			require.Zero(t, unread("audit"), "an event topic's new group starts after what was committed")
		}
		before := unread("audit")
		publish("3")
		require.EqualValues(t, before+1, unread("audit"), "and reads what comes next")

		require.False(t, exists("Audit"), "groups compare bytes")
		e.exec(e.db, q.InsertAtStart, "Audit")
		require.True(t, exists("Audit"))
		require.EqualValues(t, 3, unread("Audit"), "a command topic's group reads from the first message")

		atEnd("Audit") // exists: left as it is
		e.exec(e.db, q.InsertAtStart, "audit")
		require.EqualValues(t, 3, unread("Audit"))
		require.EqualValues(t, before+1, unread("audit"), "a row that exists is left as it is")
	})
}

// GroupsBinary makes a case-insensitive group column of MySQL binary;
// nothing to do elsewhere.
func TestStatementsGroupsBinary(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		up := e.d.GroupsBinary("legacy")
		if e.d != (mysql.Dialect{}) {
			require.Equal(t, dialect.GroupsBinaryUpgrade{}, up)
			t.Skipf("%s's group column compares bytes already", e.d)
		}
		e.exec(e.db, "CREATE TABLE watermill_offsets_legacy (consumer_group VARCHAR(255) NOT NULL, offset_acked BIGINT, offset_consumed BIGINT NOT NULL, PRIMARY KEY(consumer_group))")
		require.Equal(t, "watermill_offsets_legacy", up.Table)
		var typ string
		e.scan(up.Check, []any{up.Table}, &typ)
		require.Equal(t, "varchar", typ)
		e.exec(e.db, "INSERT INTO watermill_offsets_legacy VALUES ('audit', 0, 0)")
		require.Error(t, e.db.Exec("INSERT INTO watermill_offsets_legacy VALUES ('Audit', 0, 0)").Error, "before: one row for both")
		var wait int64
		e.scan(up.Wait, nil, &wait)
		e.exec(e.db, fmt.Sprintf(up.SetWait, 5))
		e.exec(e.db, up.Alter)
		e.scan(up.Check, []any{up.Table}, &typ)
		require.Equal(t, "varbinary", typ)
		e.exec(e.db, "INSERT INTO watermill_offsets_legacy VALUES ('Audit', 0, 0)")

		e.topicTables("fresh")
		e.scan(e.d.GroupsBinary("fresh").Check, []any{"watermill_offsets_fresh"}, &typ)
		require.Equal(t, "varbinary", typ, "postroom creates it binary")
		var none []string
		require.NoError(t, e.db.Raw(up.Check, "watermill_offsets_none").Scan(&none).Error)
		require.Empty(t, none, "no such table: no row")
	})
}

// The console's statements on an error topic's table: list the oldest,
// delete one.
func TestStatementsErrorTopic(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		_, err := e.d.ErrorTopic("bad topic")
		require.Error(t, err)
		if !e.server {
			_, err := e.d.ErrorTopic("errors")
			require.ErrorIs(t, err, dialect.ErrUnsupported)
			t.Skip("SQLite has no SQL transport")
		}
		s, err := e.d.ErrorTopic("errors")
		require.NoError(t, err)
		require.Error(t, e.db.Exec(s.Exists).Error, "no table yet")
		_, publish := e.topicTables("errors")
		require.NoError(t, e.db.Exec(s.Exists).Error)
		for _, id := range []string{"a", "b", "c"} {
			publish(id)
		}
		tx := e.begin()
		rows, err := tx.Raw(s.List, 2).Rows()
		require.NoError(t, err)
		var offsets []int64
		var ids []string
		for rows.Next() {
			var offset int64
			var id string
			var payload, md []byte
			require.NoError(t, rows.Scan(&offset, &id, &payload, &md))
			require.Equal(t, id, string(payload))
			offsets, ids = append(offsets, offset), append(ids, id)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, []string{"a", "b"}, ids, "oldest first, up to the limit")
		require.EqualValues(t, 1, e.exec(tx, s.Delete, offsets[0]))
		require.EqualValues(t, 0, e.exec(tx, s.Delete, offsets[0]))
		require.NoError(t, tx.Commit().Error)
		require.EqualValues(t, 2, e.count("SELECT COUNT(*) FROM watermill_errors"))
	})
}

// NarrowIDTables lists the message tables whose ID column is narrower
// than MessageIDColumnLength (MySQL); WidenID widens one.
func TestStatementsWidenID(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		e.exec(e.db, "CREATE TABLE watermill_narrow (uuid VARCHAR(36) NOT NULL)")
		e.exec(e.db, "CREATE TABLE watermillxnarrow (uuid VARCHAR(36) NOT NULL)") // not a topic's: '_' is no wildcard
		e.topicTables("wide")
		width := func(table string) int64 {
			return e.count("SELECT character_maximum_length FROM information_schema.columns WHERE table_schema = "+
				map[dialect.Dialect]string{postgres.Dialect{}: "current_schema()", mysql.Dialect{}: "DATABASE()"}[e.d]+
				" AND table_name = ? AND column_name = 'uuid'", table)
		}
		require.EqualValues(t, dialect.MessageIDColumnLength, width("watermill_wide"))
		if e.d == (mysql.Dialect{}) {
			require.Equal(t, []string{"watermill_narrow"}, e.strings(e.d.NarrowIDTables()))
		} else {
			require.Empty(t, e.d.NarrowIDTables(), "PostgreSQL widens a topic's table when it is initialised")
		}
		e.exec(e.db, e.d.WidenID("watermill_narrow"))
		require.EqualValues(t, dialect.MessageIDColumnLength, width("watermill_narrow"))
		e.exec(e.db, e.d.WidenID("watermill_narrow")) // again: no error
		if e.d == (mysql.Dialect{}) {
			require.Empty(t, e.strings(e.d.NarrowIDTables()))
		}
	})
}

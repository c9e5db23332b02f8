package dialect

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// OutboxTopicDefault is the watermill-sql topic of the outbox; its tables
// are "watermill_postroom_outbox" and "watermill_offsets_postroom_outbox".
const OutboxTopicDefault = "postroom_outbox"

// OutboxRelayGroup is the consumer group of the outbox relay.
const OutboxRelayGroup = "postroom_relay"

// MessageIDColumnLength is the width of the message ID column of
// watermill-sql's message tables as postroom creates them. watermill-sql's
// own is VARCHAR(36), a UUID: a longer ID (a scheduler slot, an EDI control
// number with its sender) would fail with "value too long" on every
// attempt. Every ID the bus accepts (at most 200 bytes) fits.
const MessageIDColumnLength = 255

// MessageSchema returns watermill-sql's schema and offsets adapters for a
// message table on this dialect: binary payloads (the marshaler is
// pluggable, and a malformed payload must still reach the handler and so
// the error topic), a message ID column of MessageIDColumnLength, and
// batch messages a query (1 when a crash must not lose a fetched batch's
// acks). The SQL transport's groups on MySQL read with TransportSchema's.
func (d Dialect) MessageSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	switch d {
	case Postgres:
		return wideSchema{wsql.DefaultPostgreSQLSchema{GeneratePayloadType: columnType("BYTEA"), SubscribeBatchSize: batch}, d},
			wsql.DefaultPostgreSQLOffsetsAdapter{}, nil
	case MySQL:
		return wideSchema{wsql.DefaultMySQLSchema{GeneratePayloadType: columnType("LONGBLOB"), SubscribeBatchSize: batch}, d},
			binaryGroups{}, nil
	default:
		return nil, nil, fmt.Errorf("%w: watermill-sql has no %s adapter (use PostgreSQL or MySQL/MariaDB)", ErrUnsupported, d)
	}
}

// OutboxSchema returns watermill-sql's schema and offsets adapters for the
// outbox's table on this dialect, and the relay's consumer group.
//
// On MySQL/MariaDB the relay acks row by row (watermill-sql's queue schema:
// an acked column, the rows not yet acked read in offset order). Reading
// past the highest acked offset, as the offsets of a consumer group do,
// loses a row: handlers commit their outbox rows in another order than
// AUTO_INCREMENT handed out the offsets, so a row can commit after the
// relay acked a higher one (bus TestOutboxRelaysEveryCommit). PostgreSQL's
// schema reads in transaction order (pg_snapshot_xmin) and needs no such
// change.
//
// The MySQL relay reads at READ COMMITTED (readCommitted): its locking read
// of the rows not acked then locks those rows only. At watermill-sql's
// REPEATABLE READ it would also lock the gap after them, where every new
// outbox row goes, for as long as its batch's publishes take: while a
// broker takes publishes without confirming them (a memory alarm), every
// handler sending through the outbox would wait up to the ack deadline
// (30 s) and, with a lower innodb_lock_wait_timeout, fail to the error
// topic.
func (d Dialect) OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error) {
	if d == MySQL {
		return readCommitted{wideSchema{wsql.MySQLQueueSchema{GeneratePayloadType: columnType("LONGBLOB"), SubscribeBatchSize: batch}, d}},
			queueOffsets{}, "", nil // the queue schema has no consumer groups
	}
	schema, offsets, err := d.MessageSchema(batch)
	return schema, offsets, OutboxRelayGroup, err
}

// readCommitted reads at READ COMMITTED (see OutboxSchema), and creates
// the outbox's table as the migration does (outboxMySQL).
type readCommitted struct{ wideSchema }

func (readCommitted) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

func (s readCommitted) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: s.d.outboxMySQL(params.Topic)}}, nil
}

// queueOffsets is watermill-sql's MySQLQueueOffsetsAdapter acking only the
// rows of a batch up to the last one handled. Its own AckMessageQuery marks
// every row the relay read: a row still unpublished when its ack deadline
// (30 s) runs out, as in a broker outage in the middle of a batch, would
// be marked acked with every row behind it and never relayed, without a
// log line (outbox TestAnOutageMidBatchLosesNothing).
type queueOffsets struct{ wsql.MySQLQueueOffsetsAdapter }

func (a queueOffsets) AckMessageQuery(p wsql.AckMessageQueryParams) (wsql.Query, error) {
	handled := make([]wsql.Row, 0, len(p.Rows))
	for _, r := range p.Rows { // in offset order; handling stopped at the first not acked
		if r.Offset <= p.LastRow.Offset {
			handled = append(handled, r)
		}
	}
	p.Rows = handled
	return a.MySQLQueueOffsetsAdapter.AckMessageQuery(p)
}

func columnType(t string) func(string) string { return func(string) string { return t } }

// wideSchema is a watermill-sql schema adapter whose message tables take
// IDs of MessageIDColumnLength bytes, and which widens the column of a
// table created before.
type wideSchema struct {
	wsql.SchemaAdapter
	d Dialect
}

// RequiresTransaction forwards to the wrapped adapter (PostgreSQL creates
// its tables in a transaction under an advisory lock).
func (s wideSchema) RequiresTransaction() bool {
	rt, ok := s.SchemaAdapter.(wsql.RequiresTransaction)
	return ok && rt.RequiresTransaction()
}

// SchemaInitializingQueries creates the table with the wide ID column and
// widens it where an older table has the narrow one.
func (s wideSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := s.create(params)
	if err != nil {
		return nil, err
	}
	if s.d != Postgres {
		// MySQL has no conditional DDL, and an ALTER here would wait for
		// every open transaction on the table at each subscribe: Migrate
		// widens the tables watermill-sql created (NarrowIDTables).
		return qs, nil
	}
	messages, _ := s.d.messageTables(params.Topic)
	return append(qs, wsql.Query{Query: s.d.widenID(messages)}), nil
}

// create creates the table with the wide ID column.
func (s wideSchema) create(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := s.SchemaAdapter.SchemaInitializingQueries(params)
	if err != nil {
		return nil, err
	}
	wide := fmt.Sprintf("VARCHAR(%d)", MessageIDColumnLength)
	for i := range qs {
		qs[i].Query = strings.Replace(qs[i].Query, "VARCHAR(36)", wide, 1)
	}
	return qs, nil
}

// messageTables returns the quoted names of watermill-sql's tables for
// topic on this dialect: its messages, and its consumer groups' offsets.
func (d Dialect) messageTables(topic string) (messages, offsets string) {
	switch d {
	case Postgres:
		return wsql.DefaultPostgreSQLSchema{}.MessagesTable(topic), wsql.DefaultPostgreSQLOffsetsAdapter{}.MessagesOffsetsTable(topic)
	case MySQL:
		return wsql.DefaultMySQLSchema{}.MessagesTable(topic), wsql.DefaultMySQLOffsetsAdapter{}.MessagesOffsetsTable(topic)
	}
	return "", ""
}

// NarrowIDTables returns the query that lists watermill-sql's message
// tables (watermill_<topic>) whose ID column is narrower than
// MessageIDColumnLength, on MySQL: tables an older postroom or
// watermill-sql created, which its schema adapter does not widen (MySQL
// has no conditional DDL); "" elsewhere (PostgreSQL widens a topic's
// table when it is initialised; SQLite has no SQL transport). Column:
// the table's name.
func (d Dialect) NarrowIDTables() string {
	if d != MySQL {
		return ""
	}
	return fmt.Sprintf("SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE()"+
		" AND column_name = 'uuid' AND table_name LIKE 'watermill\\_%%' AND character_maximum_length < %d ORDER BY table_name",
		MessageIDColumnLength)
}

// WidenID returns the statement that widens the ID column of the message
// table named table (unquoted; one NarrowIDTables listed).
func (d Dialect) WidenID(table string) string {
	if d == MySQL {
		return d.widenID("`" + strings.ReplaceAll(table, "`", "``") + "`")
	}
	return d.widenID(`"` + strings.ReplaceAll(table, `"`, `""`) + `"`)
}

// widenID widens the ID column of a quoted message table if it is
// narrower than MessageIDColumnLength (a table created by watermill-sql
// itself, or by an older postroom).
func (d Dialect) widenID(quotedTable string) string {
	if d == Postgres {
		name := strings.Trim(quotedTable, `"`)
		return fmt.Sprintf(`DO $body$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()`+
			` AND table_name = '%s' AND column_name = 'uuid' AND character_maximum_length < %d)`+
			` THEN ALTER TABLE %s ALTER COLUMN "uuid" TYPE VARCHAR(%d); END IF; END $body$`,
			name, MessageIDColumnLength, quotedTable, MessageIDColumnLength)
	}
	return fmt.Sprintf("ALTER TABLE %s MODIFY `uuid` VARCHAR(%d) NOT NULL", quotedTable, MessageIDColumnLength)
}

// OutboxTables returns the statements that create the outbox's tables for
// topic (the messages and the relay's offsets), as watermill-sql would
// but with the wide ID column and, on MySQL, the acked column of per-row
// acks (OutboxSchema) and its index: `postroom migrate` applies them, so a
// bus with an outbox needs no DDL rights at run time.
func (d Dialect) OutboxTables(topic string) []string {
	schema, offsets, err := d.MessageSchema(1)
	if err != nil {
		return nil // SQLite has no outbox
	}
	var qs []wsql.Query
	if d == MySQL {
		qs = []wsql.Query{{Query: d.outboxMySQL(topic)}}
	} else {
		qs, _ = schema.(wideSchema).create(wsql.SchemaInitializingQueriesParams{Topic: topic})
	}
	oqs, _ := offsets.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	var out []string
	for _, q := range append(qs, oqs...) {
		if strings.Contains(q.Query, "pg_advisory_xact_lock") {
			continue // the migration holds its own lock
		}
		out = append(out, strings.TrimRight(strings.TrimSpace(q.Query), ";"))
	}
	return out
}

// outboxMySQL creates the outbox's message table on MySQL: watermill-sql's
// with the wide ID column, the acked column and the index of the relay's
// query (the rows not acked, in offset order).
func (d Dialect) outboxMySQL(topic string) string {
	messages, _ := d.messageTables(topic)
	return "CREATE TABLE IF NOT EXISTS " + messages + " (`offset` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, `uuid` VARCHAR(" + strconv.Itoa(MessageIDColumnLength) + ") NOT NULL," +
		" `created_at` TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, `payload` LONGBLOB DEFAULT NULL, `metadata` JSON DEFAULT NULL," +
		" `acked` BOOLEAN NOT NULL DEFAULT FALSE, INDEX postroom_outbox_acked (`acked`, `offset`))"
}

// OutboxTablesExist returns a query that fails unless the outbox's tables
// for topic exist (it reads no row): on MySQL the messages, the only one
// its relay reads.
func (d Dialect) OutboxTablesExist(topic string) string {
	messages, offsets := d.messageTables(topic)
	if d == MySQL {
		return "SELECT 1 FROM " + messages + " WHERE 1 = 0"
	}
	return "SELECT 1 FROM " + messages + " WHERE 1 = 0 UNION ALL SELECT 1 FROM " + offsets + " WHERE 1 = 0"
}

// outboxPurgeWhere matches the outbox rows cleanup deletes: relayed (at or
// below the relay's acked offset) and created more than a number of
// seconds ago, the one argument. created_at is the database's own clock.
// The table is "" where there is no outbox (SQLite).
func (d Dialect) outboxPurgeWhere(topic string) (table, where string) {
	table, acked := d.messageTables(topic)
	switch d {
	case Postgres:
		return table, `created_at < LOCALTIMESTAMP - ? * INTERVAL '1 second'` +
			` AND (transaction_id, "offset") <= (SELECT last_processed_transaction_id, offset_acked FROM ` + acked +
			` WHERE consumer_group = '` + OutboxRelayGroup + `')`
	case MySQL:
		return table, "created_at < CURRENT_TIMESTAMP - INTERVAL ? SECOND AND `acked`"
	}
	return "", ""
}

// OutboxBacklog returns the query of the messages the relay has not
// published yet, with its arguments: their count and the age in seconds of
// the oldest.
func (d Dialect) OutboxBacklog(topic string) (string, []any) {
	messages, offsets := d.messageTables(topic)
	if d == Postgres {
		return `SELECT COUNT(*), COALESCE(EXTRACT(EPOCH FROM (LOCALTIMESTAMP - MIN(m.created_at))), 0)` +
			` FROM ` + messages + ` m LEFT JOIN ` + offsets + ` o ON o.consumer_group = ?` +
			` WHERE o.consumer_group IS NULL OR (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked)`, []any{OutboxRelayGroup}
	}
	return "SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), CURRENT_TIMESTAMP) / 1000000, 0)" +
		" FROM " + messages + " WHERE NOT `acked`", nil
}

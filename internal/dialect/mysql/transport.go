package mysql

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/postroom/postroom/internal/dialect"
)

// messageTables returns the quoted names of topic's message and offsets tables.
func messageTables(topic string) (messages, offsets string) {
	return wsql.DefaultMySQLSchema{}.MessagesTable(topic), wsql.DefaultMySQLOffsetsAdapter{}.MessagesOffsetsTable(topic)
}

func wideSchema(s wsql.SchemaAdapter) dialect.WideSchema { return dialect.WideSchema{SchemaAdapter: s} }

// MessageSchema: the SQL transport's groups read with TransportSchema's.
func (Dialect) MessageSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	return wideSchema(wsql.DefaultMySQLSchema{GeneratePayloadType: dialect.ColumnType("LONGBLOB"), SubscribeBatchSize: batch}), binaryGroups{}, nil
}

// OutboxSchema: the relay acks row by row (watermill-sql's queue schema),
// since handlers commit outbox rows out of offset order and reading past
// the highest acked offset would lose one.
//
// The relay reads at READ COMMITTED, locking only the rows not acked: at
// REPEATABLE READ it would also lock the gap where every new outbox row
// goes, for as long as its batch's publishes take, and handlers would
// wait (or fail) while a broker is slow to confirm.
func (Dialect) OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error) {
	return readCommitted{wideSchema(wsql.MySQLQueueSchema{GeneratePayloadType: dialect.ColumnType("LONGBLOB"), SubscribeBatchSize: batch})},
		queueOffsets{}, "", nil // the queue schema has no consumer groups
}

// readCommitted reads at READ COMMITTED (see OutboxSchema) and creates
// the table with outboxTable.
type readCommitted struct{ dialect.WideSchema }

func (readCommitted) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

func (readCommitted) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: outboxTable(params.Topic)}}, nil
}

// queueOffsets is watermill-sql's MySQLQueueOffsetsAdapter acking only a
// batch's rows up to the last handled: its own marks every row read, so
// an outage mid-batch past the ack deadline would lose the rest silently.
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

// outboxTable creates the outbox's message table: watermill-sql's with the
// wide ID column, and the index of the relay's query of rows not acked.
func outboxTable(topic string) string {
	messages, _ := messageTables(topic)
	return "CREATE TABLE IF NOT EXISTS " + messages + " (`offset` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, `uuid` VARCHAR(" + strconv.Itoa(dialect.MessageIDColumnLength) + ") NOT NULL," +
		" `created_at` TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, `payload` LONGBLOB DEFAULT NULL, `metadata` JSON DEFAULT NULL," +
		" `acked` BOOLEAN NOT NULL DEFAULT FALSE, INDEX postroom_outbox_acked (`acked`, `offset`))"
}

// NarrowIDTables: the schema adapter does not widen these, since MySQL has
// no conditional DDL and an ALTER at each subscribe would wait for every
// open transaction on the table.
func (Dialect) NarrowIDTables() string {
	return fmt.Sprintf("SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE()"+
		" AND column_name = 'uuid' AND table_name LIKE 'watermill\\_%%' AND character_maximum_length < %d ORDER BY table_name",
		dialect.MessageIDColumnLength)
}

func (Dialect) WidenID(table string) string {
	return fmt.Sprintf("ALTER TABLE %s MODIFY `uuid` VARCHAR(%d) NOT NULL", "`"+strings.ReplaceAll(table, "`", "``")+"`", dialect.MessageIDColumnLength)
}

// OutboxTables: outboxTable, and the offsets table.
func (Dialect) OutboxTables(topic string) []string {
	oqs, _ := binaryGroups{}.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	return dialect.Statements(append([]wsql.Query{{Query: outboxTable(topic)}}, oqs...))
}

// OutboxTablesExist: the messages, the only one its relay reads.
func (Dialect) OutboxTablesExist(topic string) string {
	messages, _ := messageTables(topic)
	return "SELECT 1 FROM " + messages + " WHERE 1 = 0"
}

func (Dialect) OutboxBacklog(topic string) (string, []any) {
	messages, _ := messageTables(topic)
	return "SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), CURRENT_TIMESTAMP) / 1000000, 0)" +
		" FROM " + messages + " WHERE NOT `acked`", nil
}

// GroupStarts: the start is the greatest offset, read before the insert
// so that the insert locks no row of the message table.
func (Dialect) GroupStarts(topic string) dialect.GroupStart {
	messages, offsets := messageTables(topic)
	return dialect.GroupStart{
		Exists:        "SELECT 1 FROM " + offsets + " WHERE consumer_group = ?",
		End:           "SELECT COALESCE(MAX(`offset`), 0) FROM " + messages,
		Insert:        "INSERT IGNORE INTO " + offsets + " (consumer_group, offset_acked, offset_consumed) VALUES (?, ?, ?)",
		InsertAtStart: "INSERT IGNORE INTO " + offsets + " (consumer_group, offset_acked, offset_consumed) VALUES (?, 0, 0)",
	}
}

// groupColumn is the consumer group column as watermill-sql's offsets
// adapter creates it, and binaryGroupColumn what postroom makes of it.
const (
	groupColumn       = "consumer_group VARCHAR(255) NOT NULL"
	binaryGroupColumn = "consumer_group VARBINARY(255) NOT NULL"
)

// binaryGroups is watermill-sql's offsets adapter with the consumer group
// compared byte for byte: under the default collation, which ignores case
// and trailing spaces, "audit" and "Audit" would share one offsets row and
// each get a part of the messages.
type binaryGroups struct {
	wsql.DefaultMySQLOffsetsAdapter
}

// SchemaInitializingQueries makes the group column binary.
func (a binaryGroups) SchemaInitializingQueries(params wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := a.DefaultMySQLOffsetsAdapter.SchemaInitializingQueries(params)
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if !strings.Contains(qs[i].Query, groupColumn) {
			return nil, fmt.Errorf("dialect: watermill-sql's MySQL offsets table has no %q column to make binary: %s", groupColumn, qs[i].Query)
		}
		qs[i].Query = strings.Replace(qs[i].Query, groupColumn, binaryGroupColumn, 1)
	}
	return qs, nil
}

func (Dialect) GroupsBinary(topic string) dialect.GroupsBinaryUpgrade {
	_, offsets := messageTables(topic)
	return dialect.GroupsBinaryUpgrade{
		Check: "SELECT LOWER(DATA_TYPE) FROM information_schema.COLUMNS" +
			" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'consumer_group'",
		Table:   strings.Trim(offsets, "`"),
		Wait:    "SELECT @@SESSION.lock_wait_timeout",
		SetWait: "SET SESSION lock_wait_timeout = %d",
		Alter:   "ALTER TABLE " + offsets + " MODIFY " + binaryGroupColumn,
	}
}

func (d Dialect) ErrorTopic(topic string) (dialect.ErrorTopicStatements, error) {
	return dialect.ErrorTopicOn(d, topic, func(topic string) string { t, _ := messageTables(topic); return t }, "`offset`")
}

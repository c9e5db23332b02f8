package postgres

import (
	"database/sql"
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/postroom/postroom/internal/dialect"
)

// messageTables returns the quoted names of watermill-sql's tables for
// topic: its messages, and its consumer groups' offsets.
func messageTables(topic string) (messages, offsets string) {
	return wsql.DefaultPostgreSQLSchema{}.MessagesTable(topic), wsql.DefaultPostgreSQLOffsetsAdapter{}.MessagesOffsetsTable(topic)
}

func (Dialect) MessageSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	return schemaAdapter(batch), wsql.DefaultPostgreSQLOffsetsAdapter{}, nil
}

func schemaAdapter(batch int) messageSchema {
	return messageSchema{dialect.WideSchema{SchemaAdapter: wsql.DefaultPostgreSQLSchema{GeneratePayloadType: dialect.ColumnType("BYTEA"), SubscribeBatchSize: batch}}}
}

// OutboxSchema: the schema reads in transaction order (pg_snapshot_xmin),
// so the relay reads past its acked offset as any consumer group does.
func (d Dialect) OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error) {
	schema, offsets, err := d.MessageSchema(batch)
	return schema, offsets, dialect.OutboxRelayGroup, err
}

func (d Dialect) TransportSchema(*sql.DB) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	return d.MessageSchema(1)
}

// messageSchema reads the transaction ID of each row, and widens the ID
// column of a table created before when it initialises a topic.
type messageSchema struct{ dialect.WideSchema }

func (s messageSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := s.WideSchema.SchemaInitializingQueries(params)
	if err != nil {
		return nil, err
	}
	messages, _ := messageTables(params.Topic)
	return append(qs, wsql.Query{Query: widenID(messages)}), nil
}

func (messageSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	r := wsql.Row{}
	var transactionID wsql.XID8
	err := params.Row.Scan(&r.Offset, &transactionID, &r.UUID, &r.Payload, &r.Metadata)
	r.ExtraData = map[string]any{"transaction_id": transactionID}
	return dialect.ReadMessage(r, err)
}

// NarrowIDTables: a topic's table is widened when it is initialised.
func (Dialect) NarrowIDTables() string { return "" }

func (Dialect) WidenID(table string) string {
	return widenID(`"` + strings.ReplaceAll(table, `"`, `""`) + `"`)
}

// widenID widens the ID column of a quoted message table if it is
// narrower than MessageIDColumnLength.
func widenID(quotedTable string) string {
	name := strings.Trim(quotedTable, `"`)
	return fmt.Sprintf(`DO $body$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()`+
		` AND table_name = '%s' AND column_name = 'uuid' AND character_maximum_length < %d)`+
		` THEN ALTER TABLE %s ALTER COLUMN "uuid" TYPE VARCHAR(%d); END IF; END $body$`,
		name, dialect.MessageIDColumnLength, quotedTable, dialect.MessageIDColumnLength)
}

func (Dialect) OutboxTables(topic string) []string {
	qs, _ := schemaAdapter(1).WideSchema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	oqs, _ := wsql.DefaultPostgreSQLOffsetsAdapter{}.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	return dialect.Statements(append(qs, oqs...))
}

func (Dialect) OutboxTablesExist(topic string) string {
	messages, offsets := messageTables(topic)
	return "SELECT 1 FROM " + messages + " WHERE 1 = 0 UNION ALL SELECT 1 FROM " + offsets + " WHERE 1 = 0"
}

func (Dialect) OutboxBacklog(topic string) (string, []any) {
	messages, offsets := messageTables(topic)
	return `SELECT COUNT(*), COALESCE(EXTRACT(EPOCH FROM (LOCALTIMESTAMP - MIN(m.created_at))), 0)` +
		` FROM ` + messages + ` m LEFT JOIN ` + offsets + ` o ON o.consumer_group = ?` +
		` WHERE o.consumer_group IS NULL OR (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked)`, []any{dialect.OutboxRelayGroup}
}

// GroupStarts: the start is the oldest transaction still running
// (pg_snapshot_xmin): every row of older transactions is skipped, every
// row of that transaction and later ones is read, even if it commits after
// rows of a newer transaction.
func (Dialect) GroupStarts(topic string) dialect.GroupStart {
	_, offsets := messageTables(topic)
	return dialect.GroupStart{
		Exists: `SELECT 1 FROM ` + offsets + ` WHERE consumer_group = ?`,
		Insert: `INSERT INTO ` + offsets + ` (consumer_group, offset_acked, last_processed_transaction_id)` +
			` VALUES (?, 0, pg_snapshot_xmin(pg_current_snapshot())) ON CONFLICT DO NOTHING`,
		InsertAtStart: `INSERT INTO ` + offsets + ` (consumer_group, offset_acked, last_processed_transaction_id)` +
			` VALUES (?, 0, '0') ON CONFLICT DO NOTHING`,
	}
}

// GroupsBinary: the group column compares bytes already.
func (Dialect) GroupsBinary(string) dialect.GroupsBinaryUpgrade { return dialect.GroupsBinaryUpgrade{} }

func (d Dialect) ErrorTopic(topic string) (dialect.ErrorTopicStatements, error) {
	return dialect.ErrorTopicOn(d, topic, func(topic string) string { t, _ := messageTables(topic); return t }, `"offset"`)
}

package dialect

import (
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// GroupStart holds the statements that give a consumer group of a topic
// its offsets row, if it has none: at the end of the topic's message table
// for an event topic (the group reads what is committed from then on, as a
// new queue on a broker does, not the table's whole history), at its start
// for a command topic (watermill-sql's own choice for every group).
// Having the row also spares MySQL's adapter its gap locks: the group's
// subscriptions lock one existing row.
type GroupStart struct {
	// Exists reads one row when the group (the argument) has its row; a
	// plain read, so it never waits for a subscription that holds the row
	// locked while its message is handled.
	Exists string
	// End returns the position to start at, for Insert's second argument
	// (MySQL only; "" on PostgreSQL).
	End string
	// Insert adds the group's row at the end (arguments: the group, then
	// End's result on MySQL), doing nothing if it exists.
	Insert string
	// InsertAtStart adds the group's row at the first message (argument:
	// the group), doing nothing if it exists: a command topic keeps what
	// was sent before its endpoint first ran.
	InsertAtStart string
}

// GroupStarts returns the statements of GroupStart for topic; the zero
// GroupStart on dialects without watermill-sql tables.
//
// On PostgreSQL the start is the oldest transaction still running
// (pg_snapshot_xmin): every row of older transactions is skipped, every
// row of that transaction and later ones is read, even if it commits after
// rows of a newer transaction. MySQL's adapter orders by offset alone, so
// the start is the greatest offset, read before the insert so that the
// insert locks no row of the message table.
func (d Dialect) GroupStarts(topic string) GroupStart {
	messages, offsets := d.messageTables(topic)
	switch d {
	case Postgres:
		return GroupStart{
			Exists: `SELECT 1 FROM ` + offsets + ` WHERE consumer_group = ?`,
			Insert: `INSERT INTO ` + offsets + ` (consumer_group, offset_acked, last_processed_transaction_id)` +
				` VALUES (?, 0, pg_snapshot_xmin(pg_current_snapshot())) ON CONFLICT DO NOTHING`,
			InsertAtStart: `INSERT INTO ` + offsets + ` (consumer_group, offset_acked, last_processed_transaction_id)` +
				` VALUES (?, 0, '0') ON CONFLICT DO NOTHING`,
		}
	case MySQL:
		return GroupStart{
			Exists:        "SELECT 1 FROM " + offsets + " WHERE consumer_group = ?",
			End:           "SELECT COALESCE(MAX(`offset`), 0) FROM " + messages,
			Insert:        "INSERT IGNORE INTO " + offsets + " (consumer_group, offset_acked, offset_consumed) VALUES (?, ?, ?)",
			InsertAtStart: "INSERT IGNORE INTO " + offsets + " (consumer_group, offset_acked, offset_consumed) VALUES (?, 0, 0)",
		}
	}
	return GroupStart{}
}

// groupColumnMySQL is the consumer group column as watermill-sql's MySQL
// offsets adapter creates it, and binaryGroupColumn what postroom makes of
// it.
const (
	groupColumnMySQL  = "consumer_group VARCHAR(255) NOT NULL"
	binaryGroupColumn = "consumer_group VARBINARY(255) NOT NULL"
)

// binaryGroups is watermill-sql's MySQL offsets adapter with the consumer
// group compared byte for byte. Its column is VARCHAR under the database's
// default collation, which on MySQL and MariaDB ignores case (and trailing
// spaces): two groups named alike but for case ("audit", "Audit": two
// handlers, two endpoints) would share one offsets row, and each get a
// part of the topic's messages, the rest acked by the other. Every other key
// postroom keeps on MySQL is binary too (schema.go).
type binaryGroups struct {
	wsql.DefaultMySQLOffsetsAdapter
}

// SchemaInitializingQueries creates the offsets table with a binary group
// column.
func (a binaryGroups) SchemaInitializingQueries(params wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := a.DefaultMySQLOffsetsAdapter.SchemaInitializingQueries(params)
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if !strings.Contains(qs[i].Query, groupColumnMySQL) {
			return nil, fmt.Errorf("dialect: watermill-sql's MySQL offsets table has no %q column to make binary: %s", groupColumnMySQL, qs[i].Query)
		}
		qs[i].Query = strings.Replace(qs[i].Query, groupColumnMySQL, binaryGroupColumn, 1)
	}
	return qs, nil
}

// GroupsBinaryUpgrade holds the statements that make the group column of
// a topic's offsets table binary on MySQL/MariaDB where a table created
// by watermill-sql, or by an older postroom, has it case insensitive.
type GroupsBinaryUpgrade struct {
	// Check returns the column's data type, lower case (no row: no such
	// table). Argument: Table.
	Check string
	// Table is the offsets table's name, unquoted.
	Table string
	// Wait reads the session's lock_wait_timeout; SetWait (a format for
	// the seconds) sets it, so that Alter waits that long at most for the
	// table, and then the value Wait read back.
	Wait, SetWait string
	// Alter changes the column.
	Alter string
}

// GroupsBinary returns the upgrade of topic's offsets table; the zero
// value on dialects whose groups compare bytes already. A row two groups
// alike but for case shared until then stays the first's; a running
// subscription of the other then reads the topic from its first message
// (what it missed, and what it handled, which its inbox absorbs), and one
// started afterwards starts as a new group does.
func (d Dialect) GroupsBinary(topic string) GroupsBinaryUpgrade {
	if d != MySQL {
		return GroupsBinaryUpgrade{}
	}
	_, offsets := d.messageTables(topic)
	return GroupsBinaryUpgrade{
		Check: "SELECT LOWER(DATA_TYPE) FROM information_schema.COLUMNS" +
			" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'consumer_group'",
		Table:   strings.Trim(offsets, "`"),
		Wait:    "SELECT @@SESSION.lock_wait_timeout",
		SetWait: "SET SESSION lock_wait_timeout = %d",
		Alter:   "ALTER TABLE " + offsets + " MODIFY " + binaryGroupColumn,
	}
}

package dialect

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

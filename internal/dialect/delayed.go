package dialect

// DelayedStatements are the statements on the delayed-messages table.
type DelayedStatements struct {
	// Insert adds a message: due_at, topic, message_id, payload, metadata
	// (JSON), created_at.
	Insert string
	// Due selects up to a number of messages due at a time (arguments: the
	// time, the number), oldest due first, locked for this transaction
	// and skipped by others (SKIP LOCKED; SQLite has one writer anyway):
	// id, topic, message_id, payload, metadata.
	Due string
	// Delete removes a delivered message (argument: its id).
	Delete string
	// Summary counts the messages and returns the earliest due time.
	Summary string
}

// Delayed returns the statements on table, after checking its name.
func (d Dialect) Delayed(table string) (DelayedStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return DelayedStatements{}, err
	}
	lock := " FOR UPDATE SKIP LOCKED"
	if d != Postgres && d != MySQL {
		lock = ""
	}
	return DelayedStatements{
		Insert:  "INSERT INTO " + table + " (due_at, topic, message_id, payload, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?)",
		Due:     "SELECT id, topic, message_id, payload, metadata FROM " + table + " WHERE due_at <= ? ORDER BY due_at, id LIMIT ?" + lock,
		Delete:  "DELETE FROM " + table + " WHERE id = ?",
		Summary: "SELECT COUNT(*), MIN(due_at) FROM " + table,
	}, nil
}

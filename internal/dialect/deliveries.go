package dialect

// DeliveriesStatements count a message's deliveries per consumer group
// where the transport does not: the poison-loop guard's count across
// processes and crashes.
type DeliveriesStatements struct {
	// Count adds one to a message's count, 1 for its first row.
	// Arguments: consumer, message_id, updated_at.
	Count string
	// Read reads a message's count. Arguments: consumer, message_id.
	Read string
	// Forget deletes a message's count. Arguments: consumer, message_id.
	Forget string
}

// DeliveriesOn returns the statements of the deliveries table; upsert
// ends Count's insert, adding one to a count that exists.
func DeliveriesOn(table, upsert string) (DeliveriesStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return DeliveriesStatements{}, err
	}
	return DeliveriesStatements{
		Count:  "INSERT INTO " + table + " (consumer, message_id, deliveries, updated_at) VALUES (?, ?, 1, ?)" + upsert,
		Read:   "SELECT deliveries FROM " + table + " WHERE consumer = ? AND message_id = ?",
		Forget: "DELETE FROM " + table + " WHERE consumer = ? AND message_id = ?",
	}, nil
}

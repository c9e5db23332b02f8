package dialect

// WatermarkInsert is Dialect.WatermarkUpsert without its clause that
// updates a watermark newer than the stored one.
func WatermarkInsert(table string) string {
	return "INSERT INTO " + table + " (consumer, message_type, entity_id, version_at, message_id, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
}

// WatermarkSelect is Dialect.WatermarkRead without a lock.
func WatermarkSelect(table string) string {
	return "SELECT version_at, message_id FROM " + table + " WHERE consumer = ? AND message_type = ? AND entity_id = ?"
}

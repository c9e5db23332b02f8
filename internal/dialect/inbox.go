package dialect

import "strings"

// InboxInsert returns the statement that claims an inbox key. It affects one
// row when the key is new and none when it is a duplicate; it never fails on
// a duplicate, so a PostgreSQL transaction is not aborted by it.
// Arguments: consumer, source, message_id, message_type, received_at.
func (d Dialect) InboxInsert(table string) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ") VALUES (?, ?, ?, ?, ?)" + d.onConflictSkip()
}

// InboxInsertMany is InboxInsert for n keys in one statement: it affects
// one row per new key. Arguments: InboxInsert's, key after key.
func (d Dialect) InboxInsertMany(table string, n int) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ") VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ") + d.onConflictSkip()
}

// WatermarkRead returns the read of one stale-update watermark, for a
// transaction whose WatermarkUpsert found it newer: locking on MySQL and
// PostgreSQL, so that it reads the row the upsert locked, not a snapshot
// taken before another instance wrote it (MySQL's REPEATABLE READ).
// Arguments: consumer, message_type, entity_id. Columns: version_at,
// message_id.
func (d Dialect) WatermarkRead(table string) string {
	read := "SELECT version_at, message_id FROM " + table + " WHERE consumer = ? AND message_type = ? AND entity_id = ?"
	if d == SQLite { // one writer: nothing to lock
		return read
	}
	return read + " FOR UPDATE"
}

// WatermarkUpsert returns the conditional upsert of a stale-update
// watermark. It affects at least one row when the incoming version is newer
// than the stored one (ties broken by message ID) and none otherwise.
// A watermark belongs to one consumer, like an inbox key: two handlers of
// one message type each keep their own. Equal versions are ordered by
// message ID, compared as bytes on every store (the greater wins), so every
// order of arrival converges on the same row.
// Arguments: consumer, message_type, entity_id, version_at, message_id, updated_at.
func (d Dialect) WatermarkUpsert(table string) string {
	insert := "INSERT INTO " + table + " (consumer, message_type, entity_id, version_at, message_id, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
	if d == MySQL {
		// Assignments run left to right and later ones see earlier results,
		// so the condition is evaluated on the stored row by updated_at and
		// message_id first; version_at is assigned last.
		newer := "(version_at < VALUES(version_at) OR (version_at = VALUES(version_at) AND message_id < VALUES(message_id)))"
		return insert + " ON DUPLICATE KEY UPDATE" +
			" updated_at = IF(" + newer + ", VALUES(updated_at), updated_at)," +
			" message_id = IF(" + newer + ", VALUES(message_id), message_id)," +
			" version_at = IF(version_at < VALUES(version_at), VALUES(version_at), version_at)"
	}
	return insert + " ON CONFLICT (consumer, message_type, entity_id) DO UPDATE SET" +
		" version_at = excluded.version_at, message_id = excluded.message_id, updated_at = excluded.updated_at" +
		" WHERE " + table + ".version_at < excluded.version_at" +
		" OR (" + table + ".version_at = excluded.version_at AND " + table + ".message_id < excluded.message_id)"
}

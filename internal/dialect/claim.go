package dialect

// Inbox row statuses. A row written by the transactional inbox is "done"
// from the start; the external-effects mode moves a row through
// "processing" to "done", or to "released" or "parked".
const (
	StatusDone       = "done"
	StatusProcessing = "processing"
	StatusReleased   = "released"
	StatusParked     = "parked"
)

// inboxColumns are the columns every inbox insert writes, in order.
const inboxColumns = "consumer, source, message_id, message_type, received_at"

// onConflictSkip makes an insert affect no row on a duplicate key, without
// failing (a PostgreSQL transaction survives it).
func (d Dialect) onConflictSkip() string {
	if d == MySQL {
		// Without CLIENT_FOUND_ROWS an update to the same value counts as 0 rows.
		return " ON DUPLICATE KEY UPDATE message_id = message_id"
	}
	return " ON CONFLICT DO NOTHING"
}

// InboxInsertLogged is InboxInsert that also stores the payload's checksum
// and, possibly NULL, the payload. Arguments: consumer, source, message_id,
// message_type, received_at, checksum, payload.
func (d Dialect) InboxInsertLogged(table string) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ", checksum, payload) VALUES (?, ?, ?, ?, ?, ?, ?)" + d.onConflictSkip()
}

const keyMatch = "consumer = ? AND source = ? AND message_id = ?"

// ClaimInsert claims a new key as processing, attempt 1. It affects no row
// when the key exists. Arguments: consumer, source, message_id,
// message_type, received_at, lease_until, checksum, payload.
func (d Dialect) ClaimInsert(table string) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ", status, lease_until, attempts, checksum, payload)" +
		" VALUES (?, ?, ?, ?, ?, '" + StatusProcessing + "', ?, 1, ?, ?)" + d.onConflictSkip()
}

// ClaimRead reads the claim of a key.
// Arguments: consumer, source, message_id.
func (d Dialect) ClaimRead(table string) string {
	return "SELECT status, lease_until, attempts, checksum FROM " + table + " WHERE " + keyMatch
}

// ClaimReadLocked is ClaimRead with the row locked, where the store can:
// MySQL then reads the row as it is now, not as the transaction's
// snapshot saw it. Arguments: consumer, source, message_id.
func (d Dialect) ClaimReadLocked(table string) string {
	if d == SQLite {
		return d.ClaimRead(table) // one writer at a time: the row is as it is now
	}
	return d.ClaimRead(table) + " FOR UPDATE"
}

// ClaimTakeover takes a claim over as the next attempt, if it is still in
// the status and attempt it was read in. The key's retention starts again
// at the takeover (received_at), as the copy that took over may itself be
// delivered again. Arguments: lease_until, received_at, consumer, source,
// message_id, status, attempts.
func (d Dialect) ClaimTakeover(table string) string {
	return "UPDATE " + table + " SET status = '" + StatusProcessing + "', lease_until = ?, received_at = ?, attempts = attempts + 1" +
		" WHERE " + keyMatch + " AND status = ? AND attempts = ?"
}

// ClaimTakeReleased marks a released key done as the next attempt, for
// the plain inbox of a handler that ran with external effects before.
// Arguments: received_at, consumer, source, message_id.
func (d Dialect) ClaimTakeReleased(table string) string {
	return "UPDATE " + table + " SET status = '" + StatusDone + "', lease_until = NULL, received_at = ?, attempts = attempts + 1" +
		" WHERE " + keyMatch + " AND status = '" + StatusReleased + "'"
}

// InboxCountDone adds one to the duplicates of a key that is done; it
// affects no row for a key of an unsettled claim.
// Arguments: consumer, source, message_id.
func (d Dialect) InboxCountDone(table string) string {
	return d.InboxCountDuplicate(table) + " AND status = '" + StatusDone + "'"
}

// ClaimMove moves a claim of one attempt to a new status, if it is in one
// of two statuses (pass one twice for one). Arguments: status, lease_until,
// consumer, source, message_id, attempts, from, from.
func (d Dialect) ClaimMove(table string) string {
	return "UPDATE " + table + " SET status = ?, lease_until = ?" +
		" WHERE " + keyMatch + " AND attempts = ? AND status IN (?, ?)"
}

// unresolved matches the rows whose outcome is unknown: parked, or
// processing with a lease that ran out. Argument: now.
const unresolved = "(status = '" + StatusParked + "' OR (status = '" + StatusProcessing + "' AND lease_until < ?))"

// ClaimResolve sets the status of an unresolved claim (done or released).
// The key's retention starts again at the resolution (received_at), so
// the replay that follows it finds the key. Arguments: status, now,
// consumer, source, message_id, now.
func (d Dialect) ClaimResolve(table string) string {
	return "UPDATE " + table + " SET status = ?, lease_until = NULL, received_at = ? WHERE " + keyMatch + " AND " + unresolved
}

// ClaimResolveAttempt is ClaimResolve for the claim of one attempt only:
// the one the operator saw. Arguments: status, now, consumer, source,
// message_id, now, attempts.
func (d Dialect) ClaimResolveAttempt(table string) string {
	return d.ClaimResolve(table) + " AND attempts = ?"
}

// ClaimsUnresolved lists the unresolved claims, oldest first.
// Arguments: now, limit.
func (d Dialect) ClaimsUnresolved(table string) string {
	return "SELECT consumer, source, message_id, message_type, received_at, status, lease_until, attempts FROM " + table +
		" WHERE " + unresolved + " ORDER BY received_at LIMIT ?"
}

// inboxExpired matches the inbox rows cleanup deletes: older than the
// cut-off, not processing under a live lease, and not parked: a parked
// key waits for a person (postroom inbox resolve) however old it is, or
// a replay of its message would run an effect of unknown outcome again.
// Arguments: cut-off, now.
const inboxExpired = "received_at < ? AND status <> '" + StatusParked + "' AND (status <> '" + StatusProcessing + "' OR lease_until < ?)"

// InboxCountDuplicate adds one to a key's count of duplicates skipped.
// Arguments: consumer, source, message_id.
func (d Dialect) InboxCountDuplicate(table string) string {
	return "UPDATE " + table + " SET duplicates = duplicates + 1 WHERE " + keyMatch
}

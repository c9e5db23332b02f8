package dialect

import "strings"

// Inbox row statuses: the transactional inbox writes "done"; external
// effects move a row from "processing" to "done", "released" or "parked".
const (
	StatusDone       = "done"
	StatusProcessing = "processing"
	StatusReleased   = "released"
	StatusParked     = "parked"
)

// inboxColumns are the columns every inbox insert writes, in order.
const inboxColumns = "consumer, source, message_id, message_type, received_at"

// Shared holds the statements alike on every database; a driver embeds it.
type Shared struct{}

// InsertKeys is Dialect.InboxInsertMany without its duplicate clause.
func InsertKeys(table string, n int) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ") VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ")
}

// InsertLogged is Dialect.InboxInsertLogged without its duplicate clause.
func InsertLogged(table string) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ", checksum, payload) VALUES (?, ?, ?, ?, ?, ?, ?)"
}

const keyMatch = "consumer = ? AND source = ? AND message_id = ?"

// InsertClaim is Dialect.ClaimInsert without its duplicate clause.
func InsertClaim(table string) string {
	return "INSERT INTO " + table + " (" + inboxColumns + ", status, lease_until, attempts, checksum, payload)" +
		" VALUES (?, ?, ?, ?, ?, '" + StatusProcessing + "', ?, 1, ?, ?)"
}

func (Shared) ClaimRead(table string) string {
	return "SELECT status, lease_until, attempts, checksum FROM " + table + " WHERE " + keyMatch
}

func (d Shared) ClaimTakeover(table string) string {
	return "UPDATE " + table + " SET status = '" + StatusProcessing + "', lease_until = ?, received_at = ?, attempts = attempts + 1" +
		" WHERE " + keyMatch + " AND status = ? AND attempts = ?"
}

func (d Shared) ClaimTakeReleased(table string) string {
	return "UPDATE " + table + " SET status = '" + StatusDone + "', lease_until = NULL, received_at = ?, attempts = attempts + 1" +
		" WHERE " + keyMatch + " AND status = '" + StatusReleased + "'"
}

func (d Shared) InboxCountDone(table string) string {
	return d.InboxCountDuplicate(table) + " AND status = '" + StatusDone + "'"
}

func (d Shared) ClaimMove(table string) string {
	return "UPDATE " + table + " SET status = ?, lease_until = ?" +
		" WHERE " + keyMatch + " AND attempts = ? AND status IN (?, ?)"
}

// unresolved matches the rows whose outcome is unknown: parked, or
// processing with a lease that ran out. Argument: now.
const unresolved = "(status = '" + StatusParked + "' OR (status = '" + StatusProcessing + "' AND lease_until < ?))"

func (d Shared) ClaimResolve(table string) string {
	return "UPDATE " + table + " SET status = ?, lease_until = NULL, received_at = ? WHERE " + keyMatch + " AND " + unresolved
}

func (d Shared) ClaimResolveAttempt(table string) string {
	return d.ClaimResolve(table) + " AND attempts = ?"
}

func (d Shared) ClaimsUnresolved(table string) string {
	return "SELECT consumer, source, message_id, message_type, received_at, status, lease_until, attempts FROM " + table +
		" WHERE " + unresolved + " ORDER BY received_at LIMIT ?"
}

// inboxExpired matches the inbox rows cleanup deletes: older than the
// cut-off, not under a live lease, and never parked (a parked key waits
// for `postroom inbox resolve`, or a replay would rerun an effect of
// unknown outcome). Arguments: cut-off, now.
const inboxExpired = "received_at < ? AND status <> '" + StatusParked + "' AND (status <> '" + StatusProcessing + "' OR lease_until < ?)"

func (d Shared) InboxCountDuplicate(table string) string {
	return "UPDATE " + table + " SET duplicates = duplicates + 1 WHERE " + keyMatch
}

package dialect

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DelayedStatements are the statements on the delayed-messages table.
type DelayedStatements struct {
	// Insert adds a message: due_at, topic, target_group (DelayedByReach,
	// DelayedByEndpoint, or a handler's group for a delayed retry),
	// message_id, payload, metadata (JSON), created_at.
	Insert string
	// Due selects up to a number of messages due at a time for some target
	// groups (arguments: the time, the groups, the number), oldest due
	// first, locked and skipped by others (SKIP LOCKED): id, topic,
	// target_group, message_id, payload, metadata.
	Due string
	// Claim moves a running retry's due time to its lease's end (time, id).
	Claim string
	// Renew moves a claimed retry's lease end if it still holds the old one
	// (new end, id, old end): 0 rows when another instance claimed it.
	Renew string
	// Delete removes a delivered message (argument: its id).
	Delete string
	// Settle removes a retry that ran if it still holds its lease (id, end).
	Settle string
	// Reschedule turns a retry that ran into its next one if it still holds
	// its lease (arguments: next due time, metadata, id, lease's end); one
	// statement, so a crash cannot leave both.
	Reschedule string
	// Summary counts the messages and returns the earliest due time.
	Summary string
	// List selects up to a number of messages, earliest due first.
	List string
	// Stranded counts, per reach or endpoint target group not among some
	// groups, the deliveries due by a time (arguments: the time, the
	// groups): target_group, n, oldest due_at.
	Stranded string
}

// A delayed delivery's target_group says which buses publish it: those of
// the sender's reach (byReach + reach), or for a transport without one
// the sending endpoint (byEndpoint + endpoint). Handler groups (delayed
// retries) start with neither; "" is published by every bus.
const (
	byReach    = ">"
	byEndpoint = "@"
)

// DelayedByReach is the target_group of a delayed delivery sent through a
// transport of reach; a reach too long for the column becomes its hash.
func DelayedByReach(reach string) string {
	if len(byReach+reach) > 255 {
		sum := sha256.Sum256([]byte(reach))
		reach = "sha256:" + hex.EncodeToString(sum[:])
	}
	return byReach + reach
}

// DelayedByEndpoint is the target_group for a transport without a reach.
func DelayedByEndpoint(endpoint string) string { return byEndpoint + endpoint }

// DelayedRelay says who publishes the delayed delivery of target_group
// group ("any bus", "endpoint billing", "transport amqp://…"); ok is
// false for a delayed retry (a handler's group).
func DelayedRelay(group string) (relay string, ok bool) {
	switch {
	case group == "":
		return "any bus", true
	case strings.HasPrefix(group, byReach):
		return "transport " + group[len(byReach):], true
	case strings.HasPrefix(group, byEndpoint):
		return "endpoint " + group[len(byEndpoint):], true
	}
	return "", false
}

// DelayedOn validates table and returns its statements; lock ends Due.
func DelayedOn(table, lock string) (DelayedStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return DelayedStatements{}, err
	}
	return DelayedStatements{
		Insert:     "INSERT INTO " + table + " (due_at, topic, target_group, message_id, payload, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		Due:        "SELECT id, topic, target_group, message_id, payload, metadata FROM " + table + " WHERE due_at <= ? AND target_group IN ? ORDER BY due_at, id LIMIT ?" + lock,
		Claim:      "UPDATE " + table + " SET due_at = ? WHERE id = ?",
		Renew:      "UPDATE " + table + " SET due_at = ? WHERE id = ? AND due_at = ?",
		Delete:     "DELETE FROM " + table + " WHERE id = ?",
		Settle:     "DELETE FROM " + table + " WHERE id = ? AND due_at = ?",
		Reschedule: "UPDATE " + table + " SET due_at = ?, metadata = ? WHERE id = ? AND due_at = ?",
		Summary:    "SELECT COUNT(*) AS n, MIN(due_at) AS next_due FROM " + table,
		List:       "SELECT id, due_at, topic, target_group, message_id, created_at FROM " + table + " ORDER BY due_at, id LIMIT ?",
		Stranded: "SELECT target_group, COUNT(*) AS n, MIN(due_at) AS oldest FROM " + table +
			" WHERE due_at <= ? AND target_group NOT IN ? AND (SUBSTR(target_group, 1, 1) = '" + byReach + "' OR SUBSTR(target_group, 1, 1) = '" + byEndpoint + "')" +
			" GROUP BY target_group",
	}, nil
}

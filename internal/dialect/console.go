package dialect

import (
	"fmt"
	"strings"
)

// InboxLookup returns the query of the web console's inbox lookup: the
// keys of one message ID in table, with every consumer that holds one,
// by consumer and source. Arguments: message_id, consumer (empty for
// every consumer) twice, limit.
func InboxLookup(table string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	return "SELECT consumer, source, message_id, message_type, received_at, status, duplicates FROM " + table +
		" WHERE message_id = ? AND (? = '' OR consumer = ?) ORDER BY consumer, source LIMIT ?", nil
}

// InboxActivity returns the query of the web console's "handled" charts:
// the keys done per consumer and time bucket received since a time.
// Arguments: the bucket width in seconds, the time. It returns consumer,
// bucket (seconds since 1970 divided by the width, rounded down) and n.
// The filter on received_at uses the inbox's index for cleanup.
func (d Dialect) InboxActivity(table string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	var bucket string
	switch d {
	case Postgres:
		bucket = "CAST(FLOOR(EXTRACT(EPOCH FROM received_at)) AS BIGINT) / ?"
	case MySQL:
		bucket = "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', received_at) DIV ?"
	default:
		bucket = "CAST(strftime('%s', received_at) AS INTEGER) / ?"
	}
	return "SELECT consumer, " + bucket + " AS bucket, COUNT(*) AS n FROM " + table +
		" WHERE received_at >= ? AND status = '" + StatusDone + "' GROUP BY consumer, bucket", nil
}

// ErrorTopicStatements are the web console's statements on the error
// topic's message table of the SQL transport (watermill-sql's
// "watermill_<topic>"). Nothing consumes that table: the bus appends a
// message after its last failed attempt, and an operator reads, retries
// or deletes it.
type ErrorTopicStatements struct {
	// Exists fails unless the table exists (it reads no row).
	Exists string
	// List selects up to a number of messages, oldest first, locked for
	// the transaction (another console's action waits): offset, uuid,
	// payload, metadata.
	List string
	// Delete removes one message (argument: its offset).
	Delete string
}

// ErrorTopic returns the statements on the message table of topic. The
// SQL transport needs PostgreSQL or MySQL/MariaDB.
func (d Dialect) ErrorTopic(topic string) (ErrorTopicStatements, error) {
	if !validTopic(topic) {
		return ErrorTopicStatements{}, fmt.Errorf("dialect: topic %q: watermill-sql allows only letters, digits and - $ : . _", topic)
	}
	table, _ := d.messageTables(topic)
	if table == "" {
		return ErrorTopicStatements{}, fmt.Errorf("%w: the SQL transport has no %s tables (use PostgreSQL or MySQL/MariaDB)", ErrUnsupported, d)
	}
	offset := `"offset"`
	if d == MySQL {
		offset = "`offset`"
	}
	return ErrorTopicStatements{
		Exists: "SELECT 1 FROM " + table + " WHERE 1 = 0",
		List:   "SELECT " + offset + ", uuid, payload, metadata FROM " + table + " ORDER BY " + offset + " LIMIT ? FOR UPDATE",
		Delete: "DELETE FROM " + table + " WHERE " + offset + " = ?",
	}, nil
}

// validTopic reports whether topic is a watermill-sql topic name (it goes
// into a quoted table name).
func validTopic(topic string) bool {
	if topic == "" {
		return false
	}
	for _, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-$:._", r)) {
			return false
		}
	}
	return true
}

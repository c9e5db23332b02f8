package dialect

import (
	"fmt"
	"strings"
)

// InboxLookup returns the console's query of the keys of one message ID,
// by consumer and source. Arguments: message_id, consumer ("" for all)
// twice, limit.
func InboxLookup(table string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	return "SELECT consumer, source, message_id, message_type, received_at, status, duplicates FROM " + table +
		" WHERE message_id = ? AND (? = '' OR consumer = ?) ORDER BY consumer, source LIMIT ?", nil
}

// ActivityOn is Dialect.InboxActivity with bucket's expression.
func ActivityOn(table, bucket string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	return "SELECT consumer, " + bucket + " AS bucket, COUNT(*) AS n FROM " + table +
		" WHERE received_at >= ? AND status = '" + StatusDone + "' GROUP BY consumer, bucket", nil
}

// ErrorTopicStatements are the console's statements on the SQL transport's
// error topic table ("watermill_<topic>"), which nothing consumes: an
// operator reads, retries or deletes its messages.
type ErrorTopicStatements struct {
	// Exists fails unless the table exists (it reads no row).
	Exists string
	// List selects up to a number of messages, oldest first, locked for
	// the transaction: offset, uuid, payload, metadata.
	List string
	// Delete removes one message (argument: its offset).
	Delete string
}

// ErrorTopicOn returns d's statements on topic's table: table quotes its
// name (nil: d has no SQL transport), offset is the quoted offset column.
func ErrorTopicOn(d Dialect, topic string, table func(topic string) string, offset string) (ErrorTopicStatements, error) {
	if !validTopic(topic) {
		return ErrorTopicStatements{}, fmt.Errorf("dialect: topic %q: watermill-sql allows only letters, digits and - $ : . _", topic)
	}
	if table == nil {
		return ErrorTopicStatements{}, fmt.Errorf("%w: the SQL transport has no %s tables (use PostgreSQL or MySQL/MariaDB)", ErrUnsupported, d)
	}
	return ErrorTopicStatements{
		Exists: "SELECT 1 FROM " + table(topic) + " WHERE 1 = 0",
		List:   "SELECT " + offset + ", uuid, payload, metadata FROM " + table(topic) + " ORDER BY " + offset + " LIMIT ? FOR UPDATE",
		Delete: "DELETE FROM " + table(topic) + " WHERE " + offset + " = ?",
	}, nil
}

// validTopic reports whether topic is a watermill-sql topic name.
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

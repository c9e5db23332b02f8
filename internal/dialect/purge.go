package dialect

import "fmt"

// PurgeTarget is what cleanup deletes from one table, a batch at a time.
type PurgeTarget struct {
	// Table is the table's name ("" for no table).
	Table string
	// Count counts the rows Delete would delete, all batches together.
	Count string
	// Delete deletes at most a limit of them, its last argument.
	Delete string
}

// CleanupStatements are cleanup's targets, built once by [Dialect.Cleanup].
type CleanupStatements struct {
	// Inbox: expired keys (inboxExpired). Arguments: cut-off, now.
	Inbox PurgeTarget
	// Watermarks: watermarks updated before the cut-off. Argument: cut-off.
	Watermarks PurgeTarget
	// InboxOf and WatermarksOf narrow them to an endpoint's consumers
	// (consumerPrefix's arguments last).
	InboxOf, WatermarksOf PurgeTarget
	// Deliveries: redelivery counts updated before the cut-off. Argument:
	// cut-off. DeliveriesOf narrows it as InboxOf does.
	Deliveries, DeliveriesOf PurgeTarget
	// Outbox: messages relayed (at or below the relay's offset) and older
	// than an age in seconds (the argument), by the database's clock.
	// Table "" without an outbox topic.
	Outbox PurgeTarget
}

// CleanupOn is Dialect.Cleanup on d: purge deletes at most a limit (its
// last argument) of table's rows matching where; outbox returns the
// outbox's table and the condition of its expired rows (nil: no outbox).
func CleanupOn(d Dialect, t Tables, outboxTopic string, purge func(table, where string) string, outbox func(topic string) (table, where string)) (CleanupStatements, error) {
	if err := t.Validate(); err != nil {
		return CleanupStatements{}, err
	}
	t = t.WithDefaults()
	target := func(table, where string) PurgeTarget {
		return PurgeTarget{Table: table, Count: "SELECT COUNT(*) FROM " + table + " WHERE " + where, Delete: purge(table, where)}
	}
	c := CleanupStatements{
		Inbox:        target(t.Inbox, inboxExpired),
		Watermarks:   target(t.Watermarks, "updated_at < ?"),
		InboxOf:      target(t.Inbox, inboxExpired+consumerPrefix),
		WatermarksOf: target(t.Watermarks, "updated_at < ?"+consumerPrefix),
		Deliveries:   target(DeliveriesTableDefault, "updated_at < ?"),
		DeliveriesOf: target(DeliveriesTableDefault, "updated_at < ?"+consumerPrefix),
	}
	if outboxTopic != "" {
		if err := ValidateIdentifier(outboxTopic); err != nil {
			return CleanupStatements{}, fmt.Errorf("outbox topic: %w", err)
		}
		if outbox == nil {
			return CleanupStatements{}, fmt.Errorf("%w: %s has no outbox", ErrUnsupported, d)
		}
		c.Outbox = target(outbox(outboxTopic))
	}
	return c, nil
}

// consumerPrefix narrows a purge to consumers starting with a prefix
// (arguments: its length, the prefix). SUBSTR, not LIKE: a name may hold
// '_'; names are ASCII, so characters and bytes count alike.
const consumerPrefix = " AND SUBSTR(consumer, 1, ?) = ?"

// Package outbox commits the messages a handler sends with the handler's
// transaction, and relays them to the broker after commit.
//
// [Outbox.Publish] writes messages, wrapped in Watermill's forwarder
// envelope, into a watermill-sql table through the caller's transaction: if
// the transaction rolls back, nothing was sent; if it commits, the messages
// are durably queued. [Outbox.Run] runs Watermill's forwarder, which reads
// that table and publishes each message to its destination topic on the
// broker with its original ID, so a downstream inbox absorbs any repeat of
// the relay (the relay is at least once).
//
// PostgreSQL and MySQL/MariaDB only (watermill-sql has no SQLite adapter).
// This package never imports the bus.
package outbox

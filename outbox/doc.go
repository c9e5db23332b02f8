// Package outbox commits the messages a handler sends with the handler's
// transaction, and relays them to the broker after commit.
//
// [Outbox.Publish] writes messages, in Watermill's forwarder envelope, into
// a watermill-sql table through the caller's transaction. [Outbox.Run]
// runs Watermill's forwarder, which publishes each to its topic with its
// original ID, at least once: a downstream inbox absorbs repeats.
//
// PostgreSQL and MySQL/MariaDB only (watermill-sql has no SQLite adapter).
// This package never imports the bus.
package outbox

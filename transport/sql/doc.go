// Package sql is the database-only transport: watermill-sql on PostgreSQL
// or MySQL/MariaDB, one table per topic and an offsets table per topic with
// a row per group. Subscriptions of one group take turns (the offsets row
// is locked while a message is handled), so they compete safely.
//
// watermill-sql commits the subscriber's own transaction even after a nack;
// postroom never puts business writes in it: handlers write through their
// unit of work.
//
// # Rows from other programs
//
// Another program publishes by inserting into "watermill_<topic>" (see
// docs/foreign-producers.md, "SQL: an INSERT"). The metadata column must be
// a JSON object: a string value is taken as it is, null as "", any other
// value as its JSON text. A row whose metadata is not a JSON object is
// delivered with metadata.TransportError set and moved by the bus to the
// error topic; it never holds up the rows behind it.
//
// # Order on MySQL/MariaDB
//
// A group reads the rows past the highest offset it acked. MySQL numbers a
// row (AUTO_INCREMENT) a moment before the row is in the table, and a
// transaction may commit its row after a higher one: the group waits for a
// row whose transaction is still open (until it commits, or MySQL's lock
// wait timeout), and reads a row after a missing offset only once it has
// seen that row as its next one for 2 s. A rolled-back insert delays the
// group by about that long. Multi-primary setups (Galera, circular
// replication) and an auto_increment_increment other than 1 are not
// supported.
//
// # Thirty seconds per message
//
// watermill-sql gives a message [Config.AckDeadline] (30 s by default) from
// the moment it is read, retries included; then its context ends, it is
// read again, and a later ack or move to the error topic is not recorded.
// The transport holds the copy until the first delivery's handler returns
// (in this process), logs a late ack at error and counts it in the copy's
// metadata.DeliveryCount, so the poison-loop guard moves the message aside
// after bus.Config.MaxDeliveries. Each late run may have committed: without
// the inbox, its effects happen once per run.
//
// # A message that ends its process
//
// A group reads a topic in order, so a message whose handling ended its
// process (out of memory, SIGKILL) is the next process's first read: the
// transport marks each process's first read of a topic
// metadata.RedeliveredFirstRead, which the bus counts in
// postroom_deliveries up to bus.Config.MaxDeliveries (a process already
// running that takes it over from one that died does not count it). A
// re-read after a nack in the process carries the deliveries nacked in
// metadata.DeliveryCount.
//
// # PostgreSQL: one slow message holds back every reader
//
// On PostgreSQL a group reads only the rows of transactions older than
// every transaction still open on the server (watermill-sql's rule), and a
// message's read transaction stays open until it is settled: while one
// message is handled, rows published since to any topic, for any group
// (the outbox relay's too), wait, at most AckDeadline. Any other open
// transaction that has written or locked a row on the server, in any
// database, does the same. Keep transactions there short, or use
// MariaDB/MySQL or RabbitMQ.
//
// # Tables
//
// Cleanup (CleanupStore) does not purge the "watermill_<topic>" tables:
// delete what every group has read (below each group's offset in
// "watermill_offsets_<topic>") by hand or with a job of your own.
//
// # Logging
//
// [Config.Logger] receives watermill-sql's logs: failed polls and acks at
// error, the rest at debug and trace; an error from a stop comes at info
// with stopping=true.
//
// # Commands
//
// A command sent to an endpoint that never started waits in its table
// until one does: bus.Send does not fail.
package sql

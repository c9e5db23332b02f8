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
// A program that is not postroom publishes by inserting a row into the
// topic's table "watermill_<topic>" (columns uuid, payload, metadata; on
// PostgreSQL also transaction_id = pg_current_xact_id()). The metadata
// column must be a JSON object: a string value is taken as it is, null as
// "", any other value (number, boolean, object, array) as its JSON text. A
// row whose metadata is not a JSON object is delivered with
// metadata.TransportError set, and the bus moves it to the error topic with
// the reason; it never holds up the rows behind it. (watermill-sql's own
// adapters fail on such a row at every poll, forever.)
//
// # Order on MySQL/MariaDB
//
// A group reads the rows past the highest offset it acked. MySQL numbers a
// row (AUTO_INCREMENT) a moment before the row is in the table, and a
// transaction may commit its row after a higher one: the group waits for
// a row whose transaction is still open (a long transaction inserting into
// a topic holds up its readers until it commits, or until MySQL's lock wait
// timeout, after which they try again), and reads a row after a missing
// offset only once it has seen that row as its next one for 2 s, so that
// an insert numbered before it lands first. A rolled-back insert delays
// the group by about that long. Multi-primary setups (Galera, circular
// replication) and an auto_increment_increment other than 1 are not
// supported.
//
// # Thirty seconds per message
//
// watermill-sql gives a message 30 s (its ack deadline, left at its
// default) from the moment it is read: the handler, its retries and their
// backoff included. Then the message's context ends and the message is
// read again, whatever happens to it after: an ack, or a move to the
// error topic, made after the deadline may not be recorded, so the message
// can be handled again (the inbox skips it only if a handler's
// transaction committed) and reach the error topic more than once. A
// handler that needs longer than 30 s per message, retries included, is
// not a fit for this transport.
//
// # Logging
//
// [Config.Logger] and [Transport.SetLogger] (the bus passes its
// Config.Logger) receive watermill-sql's logs: failed polls and acks at
// error level, the rest at debug and trace. An error caused by a
// cancelled context (a poll or a read cut short by a stop) comes at info,
// with stopping=true: a routine stop logs nothing at error.
//
// # Commands
//
// A topic's table is a log that every group reads from its own offset: the
// transport cannot tell that no endpoint reads a topic, so a command sent
// to an endpoint that never started waits in its table until one does (it
// is not dropped, and bus.Send does not fail).
package sql

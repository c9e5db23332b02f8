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
// watermill-sql gives a message [Config.AckDeadline] (30 s by default)
// from the moment it is read: the handler, its retries and their backoff
// included. Then the message's context ends and watermill-sql reads the
// message again; an ack or a move to the error topic made after the
// deadline is not recorded. The transport holds the new copy until the
// first delivery's handler has returned (one delivery of a message at a
// time in a process; another process may take the copy meanwhile), logs
// an ack after the deadline at error, and counts it in the copy's
// metadata.DeliveryCount, so the bus's poison-loop guard moves a message
// whose handler always outlives the deadline to the error topic after
// Config.MaxDeliveries. Each late run may have committed: the inbox skips
// the copies of a message whose handler's transaction committed; without
// it, such a handler's effects happen once per run. A handler that needs
// longer than the deadline per message, retries included, needs a longer
// AckDeadline or another transport.
//
// # A message that ends its process
//
// A group reads a topic in order, so a message whose handling ended its
// process (out of memory, a SIGKILL) is the next process's first read:
// the transport marks each process's first read of a topic
// metadata.RedeliveredFirstRead, and the bus counts it in
// postroom_deliveries, so that such a message reaches the error topic
// after bus.Config.MaxDeliveries instead of being read by each restarted
// process for ever. A re-read after a nack in the process carries the
// count of the deliveries nacked (or acked late) in metadata.DeliveryCount.
//
// # PostgreSQL: one slow message holds back every reader
//
// On PostgreSQL a group reads only the rows of transactions older than
// every transaction still open on the server (watermill-sql's rule, which
// keeps it from skipping a row committed late), and the read transaction
// of a message being handled stays open until it is settled. So while one
// message is handled, rows published since to any topic, for any group
// (and the outbox relay's), wait: up to the handler's time, at most
// AckDeadline. Any other transaction that has written or locked a row
// anywhere on the server, in any database, holds the readers back the
// same way while it stays open: a long batch job, a migration, a handler
// draining at a stop (bus.Config.StopTimeout). Keep handlers and other
// transactions on that server short, or use MariaDB/MySQL (not affected)
// or RabbitMQ.
//
// # Tables
//
// A topic's table keeps every message published to it: cleanup
// (CleanupStore) purges the inbox, watermarks, redelivery counts and
// outbox, not the
// transport's "watermill_<topic>" tables. Delete what every group has read
// (below each group's offset in "watermill_offsets_<topic>") by hand or
// with a job of your own.
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

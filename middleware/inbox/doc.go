// Package inbox makes a handler's side effects happen once per consumer
// although the broker delivers at least once.
//
// # How it works
//
// The middleware returned by [New] runs inside a unit of work (package
// unitofwork; it opens one if the message has none). It inserts the
// message's key (consumer, source, message ID) into the inbox table with
// INSERT … ON CONFLICT DO NOTHING (ON DUPLICATE KEY UPDATE on MySQL). One
// row inserted: the handler runs and its writes commit with the key. No row:
// the message was handled before; the transaction rolls back, the message is
// acked and the handler is not called. A handler error or panic rolls the key
// back with everything else, so the redelivery is handled; this is where
// Watermill's in-memory Deduplicator, which records the key first, loses
// messages.
//
// A MySQL connection opened with clientFoundRows=true (CLIENT_FOUND_ROWS)
// counts the row a duplicate's insert matched as affected, so every
// duplicate would be handled again: the bus refuses such a connection in
// Run and store.Open refuses such a DSN; used without them, call
// store.CheckFoundRows at startup. The same goes for a connection whose
// driver converts times to a zone other than UTC (loc=…), which would
// shift the keys' times: store.CheckTimeZone.
//
// # External effects
//
// With [Config.Mode] [External], for effects no transaction covers, the key
// is claimed as "processing" with a lease ([Config.Lease]) and committed
// before the handler runs; the handler passes [IdempotencyKey] to the
// external system and runs in its own unit of work, which marks the key
// "done" with its writes. A copy that finds a live claim waits for it; an
// attempt that ended without a known outcome (its process died, or it
// failed with an error not wrapped by [NotDone]) follows [Config.OnUnknown]:
// [Park] sends the message to the error topic as [*OutcomeUnknownError],
// [Retry] runs it again with the same idempotency key. `postroom inbox
// unresolved` and `postroom inbox resolve` (or the console) serve the
// operator. A handler moved from External to
// Transactional under the same consumer settles what its claims left: a
// released key is taken over, a parked one or one whose lease ran out is
// an [*OutcomeUnknownError] (and is parked), one under a live lease an
// error that is retried.
//
// # Message log
//
// [Config.Checksum] records a SHA-256 of the payload with the key (and
// [Config.StorePayload] the payload): a message that reuses a key with
// another payload is a [*ReusedIDError], not a duplicate.
//
// # Keys
//
// By default the consumer is the Watermill handler name, the message ID the
// Watermill UUID and the source the sending endpoint (metadata
// "postroom-source-endpoint", empty when absent). [Config.Key] takes the key
// from anywhere else: metadata, or the payload (for EDI, the interchange
// sender and control number). An empty or over-long ID is an
// [*KeyError], which the bus sends to the error topic without retrying.
//
// # Retention
//
// Keys older than the retention are purged by the CleanupStore handler. A
// retention shorter than the time within which the broker can redeliver lets
// duplicates through; [CheckRetention] refuses such a configuration.
package inbox

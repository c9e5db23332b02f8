// Package inbox makes a handler's side effects happen once per consumer
// although the broker delivers at least once.
//
// # How it works
//
// The middleware returned by [New] runs inside a unit of work (package
// unitofwork; it opens one if the message has none) and inserts the
// message's key (consumer, source, message ID) into the inbox table with
// INSERT … ON CONFLICT DO NOTHING (ON DUPLICATE KEY UPDATE on MySQL). One
// row inserted: the handler runs and its writes commit with the key. None:
// a duplicate; the transaction rolls back and the message is acked
// unhandled. A handler error or panic rolls the key back too, so the
// redelivery is handled.
//
// A MySQL connection with clientFoundRows=true would count a duplicate's
// matched row as inserted, and one converting times to a zone other than
// UTC (loc=…) would shift the keys' times: the bus and store.Open refuse
// both; otherwise call store.CheckFoundRows and store.CheckTimeZone.
//
// # External effects
//
// With [Config.Mode] [External], for effects no transaction covers, the key
// is claimed as "processing" with a lease ([Config.Lease]) and committed
// before the handler runs; the handler passes [IdempotencyKey] to the
// external system and its unit of work marks the key "done". A copy that
// finds a live claim waits for it; an attempt that ended without a known
// outcome (its process died, or it failed with an error not wrapped by
// [NotDone]) follows [Config.OnUnknown]: [Park] sends it to the error topic
// as [*OutcomeUnknownError], [Retry] runs it again with the same key.
// `postroom inbox unresolved` and `postroom inbox resolve` (or the console)
// serve the operator. A handler moved from External to Transactional
// settles what its claims left: a released key is taken over, a parked or
// expired one is parked as an [*OutcomeUnknownError], a live one retried.
//
// # Message log
//
// [Config.Checksum] records a SHA-256 of the payload with the key (and
// [Config.StorePayload] the payload): a message that reuses a key with
// another payload is an error matching [ErrIDReused], not a duplicate.
//
// # Keys
//
// By default the consumer is the Watermill handler name, the message ID
// the Watermill UUID and the source the sending endpoint (metadata
// "postroom-source-endpoint", empty when absent). [Config.Key] takes the
// key from elsewhere (metadata, the payload). An empty or over-long ID is
// an error matching [ErrBadKey], which the bus sends to the error topic without retrying.
//
// # Retention
//
// The CleanupStore handler purges keys older than the retention; keep keys
// longer than the longest time after which a message may be delivered
// again (retries plus the broker's redelivery window), or a duplicate gets
// through (the bus refuses a shorter retention).
package inbox

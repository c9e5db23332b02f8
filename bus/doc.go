// Package bus is postroom's facade: an endpoint with typed handlers,
// commands and events, message identity and recoverability, on a Watermill
// router.
//
// # Handlers
//
// [Handle] registers a [HandlerFunc] for a message type T. Options opt the
// handler into what it needs, and it pays for nothing else:
//
//   - [WithTransaction]: the handler runs in a database transaction that
//     [Tx] returns; it commits when the handler returns nil;
//   - [WithInbox] (with an [Inbox] for its key): the message's effects happen once per
//     handler (package inbox);
//   - [Inbox.ExternalEffects]: for effects no transaction covers (an HTTP
//     call): the key is claimed before the handler runs, which passes
//     [IdempotencyKey] on; an attempt that ended without a known outcome
//     is parked in the error topic or retried with the same key; return
//     [NotDone] when the effect certainly did not happen;
//   - [Inbox.MessageLog]: the payload's checksum (and the payload) is kept
//     with the key, and a reused ID with another payload is refused;
//   - [WithStale]: an update older than one already
//     applied to its entity is dropped (package stale).
//
// # Sending
//
// [Send] sends a command to one endpoint (this one, or the one named by
// [To]); [Publish] publishes an event to every endpoint that handles it.
// Inside a handler both are dispatched after the handler's transaction
// commits. Every message carries its identity in metadata (package
// metadata): a UUIDv7 message ID, a stable type name ([MessageName]), the
// sending endpoint, the sent-at time, correlation and causation IDs.
//
// # Recoverability
//
// A panic never kills the process. A failing message is retried in process
// with backoff ([RetryPolicy]); then, if configured, it comes back later
// ([DelayedRetries], [WithDelayedRetries]); after the last attempt, or at
// once for an unrecoverable error ([Unrecoverable], [IsUnrecoverable]: a
// bad key or version, a malformed payload, an unknown type), it goes to the
// error topic with the reason, handler, attempt count and original topic
// in its metadata. A handler that cannot reach its database is rate limited
// ([RateLimit]) instead of filling the error topic, and a message that keeps
// coming back unsettled, or that kills its process each time (counted by
// quorum queues, or with [Config.DB] in postroom_deliveries), goes to the
// error topic after [Config.MaxDeliveries] deliveries. [DeliverAt] and [DeliverAfter] send a
// message for later. docs/recoverability.md has the whole picture.
//
// # Observability
//
// [Config.Metrics.Addr] serves postroom's counters and gauges and
// Watermill's router metrics for Prometheus; [Config.Tracing.Provider] makes
// an OpenTelemetry span per delivery and carries the trace context in
// metadata (package tracing).
//
// # Cleanup
//
// As soon as a handler uses the inbox or the stale check, [Bus.Run] also
// runs a durable schedule that sends handlers.CleanupStore to this endpoint
// every 12 hours, on one instance per slot ([CleanupSchedule]).
package bus

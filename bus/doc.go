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
//   - [WithInbox], [WithInboxKey]: the message's effects happen once per
//     handler (package inbox);
//   - [WithStale], [WithStaleVersion]: an update older than one already
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
// with backoff ([RetryPolicy]); after the last attempt, or at once for an
// unrecoverable error ([IsUnrecoverable]: a bad key or version, a malformed
// payload, an unknown type), it goes to the error topic with the reason,
// handler, attempt count and original topic in its metadata.
//
// # Cleanup
//
// As soon as a handler uses the inbox or the stale check, [Bus.Run] also
// runs a durable schedule that sends handlers.CleanupStore to this endpoint
// every 12 hours, on one instance per slot ([CleanupConfig]).
package bus

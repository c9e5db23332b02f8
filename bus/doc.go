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
//     commits when it returns nil;
//   - [WithInbox] (with an [Inbox]): the message's effects happen once per
//     handler (package inbox); [Inbox.ExternalEffects] for effects no
//     transaction covers (docs/effects.md); [Inbox.MessageLog] refuses a
//     reused ID with another payload;
//   - [WithStale]: an update older than one already applied to its entity
//     is dropped (package stale).
//
// # Sending
//
// [Send] sends a command to one endpoint (this one, or the one named by
// [To]); [Publish] publishes an event to every endpoint that handles it.
// Inside a handler both are dispatched after the handler's transaction
// commits. Every message carries its identity in metadata (package
// metadata): a UUIDv7 ID, a stable type name ([MessageName]), the sending
// endpoint, the sent-at time, correlation and causation IDs.
//
// # Recoverability
//
// A panic never kills the process. A failing message is retried in process
// ([RetryPolicy]), then, if configured, later ([DelayedRetries]); after the
// last attempt, or at once for an [Unrecoverable] error, it goes to the
// error topic. An outage of the database is waited out ([RateLimit]), and a
// message that keeps coming back unsettled goes aside after
// [Config.MaxDeliveries]. [DeliverAt] and [DeliverAfter] send a message for
// later. See docs/recoverability.md.
//
// # Observability
//
// [Config.Metrics.Addr] serves postroom's and Watermill's metrics for
// Prometheus; [Config.Tracing.Provider] makes an OpenTelemetry span per
// delivery and carries the trace context in metadata (package tracing).
//
// # Cleanup
//
// As soon as a handler uses the inbox or the stale check, [Bus.Run] also
// runs a durable schedule that sends handlers.CleanupStore to this endpoint
// every 12 hours, on one instance per slot ([CleanupSchedule]).
package bus

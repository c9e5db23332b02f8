// Package tracing makes an OpenTelemetry span per handled message and
// carries the trace context in message metadata (W3C traceparent by
// default), across send and publish, on any transport.
//
// # On a Watermill router
//
// [New] returns a plain message.HandlerMiddleware, like the inbox's and the
// stale check's; publish with [Inject] so the consumer's span continues
// the producer's trace.
//
// # On the bus
//
// bus.Config.Tracing.Provider turns it on for every handler: the span covers
// the delivery with its retries, a message moved to the error topic marks it
// failed, and everything a handler sends carries its span's
// context. Without a TracerProvider nothing is traced and nothing is paid.
package tracing

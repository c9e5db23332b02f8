package tracing

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// scopeName is the instrumentation scope of postroom's spans.
const scopeName = "github.com/postroom/postroom"

// Config configures tracing.
type Config struct {
	// TracerProvider makes the spans. Required: pass otel.GetTracerProvider()
	// to use the global one.
	TracerProvider trace.TracerProvider
	// Propagator carries the trace context in message metadata. Defaults to
	// W3C Trace Context (propagation.TraceContext).
	Propagator propagation.TextMapPropagator
	// Handler names the handler in span names ("<handler> process") and in
	// the consumer group attribute. Defaults to each message's Watermill
	// handler name.
	Handler string
}

func (c Config) withDefaults() Config {
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}

// ErrNoTracerProvider is returned by New without a TracerProvider.
var ErrNoTracerProvider = errors.New("tracing: Config.TracerProvider is nil: pass otel.GetTracerProvider() or your SDK's provider")

// New returns a middleware that runs each message in a consumer span named
// "<handler> process", a child of the trace context in the message's
// metadata, and puts it in the message context, so what the handler sends
// (with Inject) carries it on. An error ends the span with an error status.
func New(cfg Config) (message.HandlerMiddleware, error) {
	if cfg.TracerProvider == nil {
		return nil, ErrNoTracerProvider
	}
	cfg = cfg.withDefaults()
	tracer := cfg.TracerProvider.Tracer(scopeName)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			parent := msg.Context()
			handler := cfg.Handler
			if handler == "" {
				handler = message.HandlerNameFromCtx(parent)
			}
			ctx := cfg.Propagator.Extract(parent, carrier(msg.Metadata))
			ctx, span := tracer.Start(ctx, handler+" process", trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("messaging.operation.type", "process"),
					attribute.String("messaging.message.id", msg.UUID),
					attribute.String("messaging.destination.name", message.SubscribeTopicFromCtx(parent)),
					attribute.String("messaging.consumer.group.name", handler),
				))
			defer span.End()
			msg.SetContext(ctx)
			defer msg.SetContext(parent)
			out, err := h(msg)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return out, err
		}
	}, nil
}

// Inject writes the trace context of ctx into msg's metadata with p (W3C
// Trace Context when nil), so the consumer's span continues the trace.
func Inject(ctx context.Context, msg *message.Message, p propagation.TextMapPropagator) {
	if p == nil {
		p = propagation.TraceContext{}
	}
	p.Inject(ctx, carrier(msg.Metadata))
}

// carrier adapts message metadata to OpenTelemetry's propagation.
type carrier message.Metadata

// Get returns the value of key.
func (c carrier) Get(key string) string { return c[key] }

// Set sets key.
func (c carrier) Set(key, value string) { c[key] = value }

// Keys lists the keys.
func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

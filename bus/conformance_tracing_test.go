package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metadata"
)

// checkDelayedRetryKeepsTrace: a delayed retry runs through what the
// first delivery did, Config.Middleware and tracing: what it publishes
// continues the request's trace, and a message that reaches the error
// topic after its delayed retries leaves a failed span. A retry run from
// the database around both ends the trace at the first failure (its span
// OK), begins new traces for its sends, and is seen by no Middleware.
func checkDelayedRetryKeepsTrace(t *testing.T, c *confCase) {
	var seen atomic.Int32 // conf.Cmd deliveries a Config.Middleware saw
	spans := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	b := newConfBus(t, c, func(cfg *bus.Config) {
		cfg.Tracing.Provider = provider
		cfg.Retry = bus.RetryPolicy{NoRetries: true}
		cfg.DelayedPollInterval = 50 * time.Millisecond
		cfg.Middleware = []message.HandlerMiddleware{func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				if msg.Metadata.Get(metadata.MessageType) == bus.MessageName[ConfCmd]() {
					seen.Add(1)
				}
				return h(msg)
			}
		}}
	})
	errs := errorQueue(t, c)
	const never = -1
	var calls atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		if m.N == never {
			return errors.New("ledger closed")
		}
		if calls.Add(1) == 1 {
			return errors.New("first delivery fails")
		}
		return bus.Publish(ctx, b, &ConfRelayed{From: "retried"})
	}, bus.WithDelayedRetries(100*time.Millisecond)))
	relayed := make(chan struct{}, 1)
	require.NoError(t, bus.Handle(b, func(context.Context, *ConfRelayed) error { relayed <- struct{}{}; return nil }))
	run(t, b)

	tracer := provider.Tracer("test")
	ctx, request := tracer.Start(context.Background(), "HTTP POST /invoices")
	require.NoError(t, bus.Send(ctx, b, &ConfCmd{N: 1}, bus.To(b.Endpoint())))
	request.End()
	ctx2, request2 := tracer.Start(context.Background(), "HTTP POST /never")
	require.NoError(t, bus.Send(ctx2, b, &ConfCmd{N: never}, bus.To(b.Endpoint())))
	request2.End()
	select {
	case <-relayed:
	case <-time.After(30 * time.Second):
		t.Fatal("the delayed retry did not publish")
	}
	select {
	case failed := <-errs:
		failed.Ack()
	case <-time.After(30 * time.Second):
		t.Fatal("the failing message did not reach the error topic")
	}
	time.Sleep(300 * time.Millisecond) // the last spans end
	var cmdSpans, failedInNever int
	var relayedSpan sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		switch {
		case sp.Name() == "conf.Cmd process" && sp.SpanContext().TraceID() == request.SpanContext().TraceID():
			cmdSpans++
		case sp.Name() == "conf.Relayed process":
			relayedSpan = sp
		}
		if sp.SpanContext().TraceID() == request2.SpanContext().TraceID() && sp.Status().Code == codes.Error {
			failedInNever++
		}
	}
	require.NotNil(t, relayedSpan, "no span handled the event the delayed retry published")
	require.Equal(t, request.SpanContext().TraceID(), relayedSpan.SpanContext().TraceID(),
		"the event published by the delayed retry starts a new trace: the request's trace is cut at the delayed retry")
	require.Equal(t, 2, cmdSpans, "the first delivery and the delayed retry each have a span in the request's trace")
	require.NotZero(t, failedInNever, "a message moved to the error topic after its delayed retries leaves no failed span")
	require.EqualValues(t, 4, seen.Load(), "a Middleware sees each message's delivery and its delayed retry")
}

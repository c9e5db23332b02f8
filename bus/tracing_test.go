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
	"go.opentelemetry.io/otel/trace"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestTraceContextCrossesSendAndPublish: a request's span sends a command;
// its handler publishes an event; a third handler fails into the error
// topic. On every transport the three handling spans are one trace, each
// the child of the span that sent its message, and the failure shows.
func TestTraceContextCrossesSendAndPublish(t *testing.T) {
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			db, tr := s.open(t)
			spans := tracetest.NewSpanRecorder()
			provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
			b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr(), DB: db, TracerProvider: provider,
				Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
			require.NoError(t, err)
			require.NoError(t, bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
				return bus.Publish(ctx, b, &OrderPlaced{OrderID: m.OrderID})
			}))
			require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }))
			require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return errors.New("ledger closed") }, bus.Named("ledger")))
			ep := start(t, b, "error")

			ctx, request := provider.Tracer("test").Start(context.Background(), "HTTP POST /invoices")
			require.NoError(t, bus.Send(ctx, b, &CreateInvoice{OrderID: "o-1"}, bus.To(b.Endpoint())))
			request.End()
			select {
			case <-ep.errors:
			case <-time.After(20 * time.Second):
				t.Fatal("the ledger's failure did not reach the error topic")
			}
			byName := map[string]sdktrace.ReadOnlySpan{}
			require.Eventually(t, func() bool {
				for _, sp := range spans.Ended() {
					byName[sp.Name()] = sp
				}
				return len(byName) == 4
			}, 10*time.Second, 10*time.Millisecond)
			root := byName["HTTP POST /invoices"]
			create, placed, ledger := byName["billing.CreateInvoice process"], byName["sales.OrderPlaced process"], byName["ledger process"]
			require.NotNil(t, create)
			require.NotNil(t, placed)
			require.NotNil(t, ledger)
			for _, sp := range []sdktrace.ReadOnlySpan{create, placed, ledger} {
				require.Equal(t, root.SpanContext().TraceID(), sp.SpanContext().TraceID(), sp.Name())
				require.Equal(t, trace.SpanKindConsumer, sp.SpanKind())
			}
			require.Equal(t, root.SpanContext().SpanID(), create.Parent().SpanID())
			require.Equal(t, create.SpanContext().SpanID(), placed.Parent().SpanID())
			require.Equal(t, create.SpanContext().SpanID(), ledger.Parent().SpanID())
			require.Equal(t, codes.Error, ledger.Status().Code)
			require.Contains(t, ledger.Status().Description, "ledger closed")
			require.Equal(t, codes.Unset, placed.Status().Code)
		})
	}
}

// TestADelayedRetryKeepsItsTraceAndMiddleware: a delayed retry runs in a
// span of the message's trace and through Config.Middleware, as its
// first delivery did: what it publishes continues the request's trace, and
// a message that reaches the error topic after its delayed retries leaves
// a failed span. Before, the retry ran from the database around both: the
// trace ended at the first failure (its span OK), the retry's sends began
// new traces, and no Middleware saw it (found by a review).
func TestADelayedRetryKeepsItsTraceAndMiddleware(t *testing.T) {
	db := testenv.SQLite(t)
	var seen atomic.Int32 // CreateInvoice deliveries a Config.Middleware saw
	spans := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: db, TracerProvider: provider,
		Retry: bus.RetryPolicy{NoRetries: true}, DelayedPollInterval: 50 * time.Millisecond,
		Middleware: []message.HandlerMiddleware{func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				if msg.Metadata.Get(metadata.MessageType) == bus.MessageName[CreateInvoice]() {
					seen.Add(1)
				}
				return h(msg)
			}
		}},
		Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	var calls atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
		if m.OrderID == "never" {
			return errors.New("ledger closed")
		}
		if calls.Add(1) == 1 {
			return errors.New("first delivery fails")
		}
		return bus.Publish(ctx, b, &OrderPlaced{OrderID: m.OrderID})
	}, bus.WithDelayedRetries(100*time.Millisecond)))
	placed := make(chan struct{}, 1)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { placed <- struct{}{}; return nil }))
	ep := start(t, b, "error")

	tracer := provider.Tracer("test")
	ctx, request := tracer.Start(context.Background(), "HTTP POST /invoices")
	require.NoError(t, bus.Send(ctx, b, &CreateInvoice{OrderID: "o-1"}, bus.To(b.Endpoint())))
	request.End()
	ctx2, request2 := tracer.Start(context.Background(), "HTTP POST /never")
	require.NoError(t, bus.Send(ctx2, b, &CreateInvoice{OrderID: "never"}, bus.To(b.Endpoint())))
	request2.End()
	select {
	case <-placed:
	case <-time.After(20 * time.Second):
		t.Fatal("the delayed retry did not publish")
	}
	select {
	case <-ep.errors:
	case <-time.After(20 * time.Second):
		t.Fatal("the failing message did not reach the error topic")
	}
	time.Sleep(300 * time.Millisecond)
	var createSpans, failedInNever int
	var placedSpan sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		switch {
		case sp.Name() == "billing.CreateInvoice process" && sp.SpanContext().TraceID() == request.SpanContext().TraceID():
			createSpans++
		case sp.Name() == "sales.OrderPlaced process":
			placedSpan = sp
		}
		if sp.SpanContext().TraceID() == request2.SpanContext().TraceID() && sp.Status().Code == codes.Error {
			failedInNever++
		}
	}
	require.NotNil(t, placedSpan)
	t.Logf("CreateInvoice spans in the request's trace: %d (want 2: first delivery + delayed retry)", createSpans)
	t.Logf("failed spans in the trace of the message that reached the error topic: %d (want >= 1)", failedInNever)
	require.Equal(t, request.SpanContext().TraceID(), placedSpan.SpanContext().TraceID(),
		"the event published by the delayed retry starts a new trace: the request's trace is cut at the delayed retry")
	require.Equal(t, 2, createSpans, "the delayed retry runs without a span")
	require.NotZero(t, failedInNever, "a message moved to the error topic after its delayed retries leaves no failed span")
	require.EqualValues(t, 4, seen.Load(), "a Middleware sees each message's delivery and its delayed retry")
}

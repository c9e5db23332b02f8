package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
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
			b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr(), DB: db,
				Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}, Tracing: bus.Tracing{Provider: provider}})
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

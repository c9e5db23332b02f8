package tracing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postroom/postroom/middleware/tracing"
)

func TestMiddlewareContinuesTheProducersTrace(t *testing.T) {
	_, err := tracing.New(tracing.Config{})
	require.ErrorIs(t, err, tracing.ErrNoTracerProvider)

	spans := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mw, err := tracing.New(tracing.Config{TracerProvider: provider, Handler: "billing"})
	require.NoError(t, err)
	ctx, producer := provider.Tracer("test").Start(context.Background(), "producer")
	msg := message.NewMessage("m-1", nil)
	tracing.Inject(ctx, msg, nil)
	producer.End()
	require.NotEmpty(t, msg.Metadata.Get("traceparent"))

	var seen trace.SpanContext
	_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
		seen = trace.SpanContextFromContext(msg.Context())
		return nil, errors.New("boom")
	})(msg)
	require.Error(t, err)
	ended := spans.Ended()
	require.Len(t, ended, 2)
	consumer := ended[1]
	require.Equal(t, "billing process", consumer.Name())
	require.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID())
	require.Equal(t, consumer.SpanContext(), seen, "the handler runs in the span")
	require.Equal(t, codes.Error, consumer.Status().Code)
}

package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport/amqp"
)

// TestErrorQueueKeepsMessagesWithoutASubscriber: on RabbitMQ a failed
// message is kept in the error queue although nobody subscribed to the error
// topic when it failed (an exchange with no queue drops what it gets).
func TestErrorQueueKeepsMessagesWithoutASubscriber(t *testing.T) {
	url := testenv.RequireAMQP(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Retry: bus.RetryPolicy{NoRetries: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return errors.New("always fails") }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	require.NoError(t, bus.Publish(ctx, b, &OrderPlaced{OrderID: "o-1"}))
	waitFor(t, "the failure", func() bool { return b.Counters().Total(metrics.Failed) == 1 })
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())

	// Only now does an operator read the error queue.
	m := readErrorQueue(t, url, errorTopic)
	require.Equal(t, "always fails", m.Metadata.Get(metadata.ErrorReason))
}

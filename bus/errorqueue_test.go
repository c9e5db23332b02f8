package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
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
	tr2, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	defer tr2.Close()
	sub, err := tr2.Subscriber(bus.ErrorQueueGroup)
	require.NoError(t, err)
	readCtx, stop := context.WithCancel(context.Background())
	defer stop()
	msgs, err := sub.Subscribe(readCtx, errorTopic)
	require.NoError(t, err)
	select {
	case m := <-msgs:
		m.Ack()
		require.Equal(t, "always fails", m.Metadata.Get(metadata.ErrorReason))
	case <-time.After(10 * time.Second):
		t.Fatal("the failed message was not kept")
	}
}

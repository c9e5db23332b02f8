package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// TestErrorQueueKeepsMessagesWithoutASubscriber: on RabbitMQ a failed
// message is kept in the error queue although nobody subscribed to the error
// topic when it failed (an exchange with no queue drops what it gets).
func TestErrorQueueKeepsMessagesWithoutASubscriber(t *testing.T) {
	b, _, url, errorTopic := amqpBusWithoutRetries(t)
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

// TestOversizedMetadataReachesTheErrorQueue: a message whose headers the
// broker took from its producer (just under RabbitMQ's frame_max) fails;
// with the error metadata added, RabbitMQ refuses the copy, so it is moved
// without its largest value, which the error metadata names, and the
// message behind it is handled. Otherwise the message is nacked and
// redelivered over and over (about a thousand times in 15 s), blocking
// the queue behind it.
func TestOversizedMetadataReachesTheErrorQueue(t *testing.T) {
	b, tr, url, errorTopic := amqpBusWithoutRetries(t)
	var handled atomic.Int32
	require.NoError(t, bus.Handle(b, func(_ context.Context, o *OrderPlaced) error {
		if o.OrderID == "big" {
			return errors.New("refused")
		}
		handled.Add(1)
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	big := message.NewMessage(uuid.NewString(), []byte(`{"OrderID":"big"}`))
	big.Metadata.Set(metadata.MessageType, "sales.OrderPlaced")
	big.Metadata.Set("x-big", strings.Repeat("x", 130_800)) // frame_max is 131,072
	require.NoError(t, tr.Publisher().Publish(bus.EventTopic(bus.MessageName[OrderPlaced]()), big))
	require.NoError(t, bus.Publish(ctx, b, &OrderPlaced{OrderID: "after"}))
	waitFor(t, "the message behind it", func() bool { return handled.Load() == 1 })
	waitFor(t, "the failure", func() bool { return b.Counters().Total(metrics.Failed) == 1 })
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())

	m := readErrorQueue(t, url, errorTopic)
	require.Equal(t, big.UUID, m.UUID)
	require.Equal(t, "refused", m.Metadata.Get(metadata.ErrorReason))
	require.Equal(t, "x-big (130800 bytes)", m.Metadata.Get(metadata.ErrorDroppedMetadata))
	require.Empty(t, m.Metadata.Get("x-big"))
	require.JSONEq(t, `{"OrderID":"big"}`, string(m.Payload))
}

// amqpBusWithoutRetries is a bus on RabbitMQ whose failed messages go to
// an error topic of their own at once, with its transport, the broker's
// URL and that topic.
func amqpBusWithoutRetries(t *testing.T) (*bus.Bus, *amqp.Transport, string, string) {
	t.Helper()
	url := testenv.RequireAMQP(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Retry: bus.RetryPolicy{NoRetries: true}})
	require.NoError(t, err)
	return b, tr, url, errorTopic
}

// TestADeletedErrorQueueIsDeclaredAgain: the error queue deleted while the
// bus runs (an operator, a broker reset) is declared again when a failed
// message finds no queue, and takes it. Otherwise the move is refused
// (NO_ROUTE) and the message nacked and redelivered at once, hundreds of
// times a second with three log lines each, until a restart.
func TestADeletedErrorQueueIsDeclaredAgain(t *testing.T) {
	b, _, url, errorTopic := amqpBusWithoutRetries(t)
	var calls atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error {
		calls.Add(1)
		return errors.New("always fails")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()

	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(amqp.QueueName(errorTopic, transport.ErrorQueueGroup), false, false, false)
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	require.NoError(t, bus.Publish(ctx, b, &OrderPlaced{OrderID: "o-1"}))
	waitFor(t, "the failure", func() bool { return b.Counters().Total(metrics.Failed) == 1 })
	require.EqualValues(t, 1, calls.Load(), "moved at its first failure, not nacked in a loop")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
	m := readErrorQueue(t, url, errorTopic)
	require.Equal(t, "always fails", m.Metadata.Get(metadata.ErrorReason))
}

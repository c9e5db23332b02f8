package amqpqueue_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestBrowseRemovesWhatItTookWhenStopped: a Browse whose context ends
// after visit took a message (the console's request ended by the browser)
// still removes that message. Given back to the queue, a message already
// replayed comes back to be replayed again, and a deleted one reappears.
func TestBrowseRemovesWhatItTookWhenStopped(t *testing.T) {
	url := testenv.RequireAMQP(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	topic := testenv.Name("errors_")
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	for _, id := range []string{"m1", "m2", "m3"} {
		require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(id, nil)))
	}
	q, err := amqpqueue.Open(url, topic, "g")
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	err = q.Browse(ctx, 10, func(*message.Message) (bool, error) {
		cancel() // the request ends once the first is taken
		return true, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	var left []string
	require.NoError(t, q.Browse(context.Background(), 10, func(m *message.Message) (bool, error) {
		left = append(left, m.UUID)
		return false, nil
	}))
	require.Equal(t, []string{"m2", "m3"}, left, "the message taken before the stop is gone")
}

// TestAMessageWithoutAnIDIsNotReplayable: the bus refuses a message
// without an ID before any handler, so a replay would only bring it back
// to the error topic; it is refused as not replayable, on every transport
// (ReplayCopy is theirs), rather than `postroom errors replay ""` sending
// it and saying it replayed nothing.
func TestAMessageWithoutAnIDIsNotReplayable(t *testing.T) {
	msg := message.NewMessage("", []byte(`{}`))
	msg.Metadata.Set(metadata.ErrorTopic, "billing.cmd.billing.CreateInvoice")
	msg.Metadata.Set(metadata.ErrorGroup, "billing.billing.CreateInvoice")
	_, _, _, err := amqpqueue.ReplayCopy(msg)
	require.ErrorIs(t, err, amqpqueue.ErrNotReplayable)
	require.ErrorContains(t, err, "has no ID")
}

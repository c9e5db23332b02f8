package amqp_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

// TestSetLogger: Config.Logger gets the publisher's connect; after
// SetLogger the subscribers log to the new logger, the
// old one gets nothing more, and nacks and unreadable messages show as
// warnings with the message ID.
func TestSetLogger(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("logs_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	before, after := &recorder{}, &recorder{}
	tr := newTransport(t, amqp.Config{Logger: slog.New(before)})
	require.Empty(t, before.find(slog.LevelInfo, "amqp: connected the publisher"), "New connects nothing")
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))
	require.Len(t, before.find(slog.LevelInfo, "amqp: connected the publisher"), 1, "Config.Logger gets the publisher's connect")

	tr.SetLogger(slog.New(after))

	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	require.Len(t, after.find(slog.LevelInfo, "amqp: connected the subscriber of group g"), 1, "the subscriber's connect")
	nacked := false
	got := consume(t, sub, topic, func(*message.Message) bool {
		if nacked {
			return false
		}
		nacked = true
		return true
	})

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	require.NoError(t, tr.Publisher().Publish(topic, msg))
	require.NoError(t, tr.PublishMandatory(topic, message.NewMessage(watermill.NewUUID(), nil)))

	a.publish(topic, amqp091.Publishing{Headers: amqp091.Table{"x": int32(1)}})
	require.Eventually(t, func() bool { return len(got.all()) == 4 }, 10*time.Second, 20*time.Millisecond)

	nacks := after.find(slog.LevelWarn, "amqp: message nacked; RabbitMQ requeues it for immediate redelivery")
	require.Len(t, nacks, 1)
	require.Equal(t, msg.UUID, attr(nacks[0], "message_id"))
	require.Equal(t, amqp.QueueName(topic, "g"), attr(nacks[0], "queue"))
	require.NotEmpty(t, attr(nacks[0], "reason"))

	// Said once the message is handed out: the consumer may have it first,
	// so a check right away can come too soon.
	var unread []slog.Record
	require.Eventually(t, func() bool {
		unread = after.find(slog.LevelWarn, "amqp: received a message the transport could not read in full; it goes to the error topic")
		return len(unread) > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, unread, 1)
	require.Equal(t, amqp.ErrorNoID, attr(unread[0], "reason"))

	require.Empty(t, before.find(slog.LevelInfo, "amqp: connected the subscriber of group g"), "the old logger gets nothing after SetLogger")
	require.Len(t, before.find(slog.LevelInfo, "amqp: connected the publisher"), 1)
}

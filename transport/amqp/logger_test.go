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

// TestSetLogger: after SetLogger, watermill-amqp's publisher created in New
// and the subscribers log to the new logger, the old one gets nothing more,
// and nacks and unreadable messages show as warnings with the message ID.
func TestSetLogger(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("logs_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	before, after := &recorder{}, &recorder{}
	tr := newTransport(t, amqp.Config{Logger: slog.New(before)})
	require.NotEmpty(t, before.find(slog.LevelInfo, "Connected to AMQP"), "Config.Logger gets watermill-amqp's logs")

	tr.SetLogger(slog.New(after))

	sub, err := tr.Subscriber("g")
	require.NoError(t, err)
	require.NotEmpty(t, after.find(slog.LevelInfo, "Connected to AMQP"), "the subscriber's connect")
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
	recs := after.find(watermill.LevelTrace, "Publishing message")
	require.NotEmpty(t, recs, "the publisher created in New logs to the new logger")
	require.Equal(t, msg.UUID, attr(recs[0], "message_uuid"))

	require.NoError(t, tr.PublishMandatory(topic, message.NewMessage(watermill.NewUUID(), nil)))
	require.NotEmpty(t, after.find(slog.LevelInfo, "amqp: connected the mandatory publisher"))

	a.publish(topic, amqp091.Publishing{Headers: amqp091.Table{"x": int32(1)}})
	require.Eventually(t, func() bool { return len(got.all()) == 4 }, 10*time.Second, 20*time.Millisecond)

	nacks := after.find(slog.LevelWarn, "amqp: message nacked; RabbitMQ requeues it for immediate redelivery")
	require.Len(t, nacks, 1)
	require.Equal(t, msg.UUID, attr(nacks[0], "message_id"))
	require.Equal(t, amqp.QueueName(topic, "g"), attr(nacks[0], "queue"))
	require.NotEmpty(t, attr(nacks[0], "reason"))

	unread := after.find(slog.LevelWarn, "amqp: received a message the transport could not read in full; it goes to the error topic")
	require.Len(t, unread, 1)
	require.Equal(t, amqp.ErrorNoID, attr(unread[0], "reason"))

	require.Empty(t, before.find(watermill.LevelTrace, "Publishing message"), "the old logger gets nothing after SetLogger")
	require.Empty(t, before.find(slog.LevelInfo, "amqp: connected the mandatory publisher"))
	require.Len(t, before.find(slog.LevelInfo, "Connected to AMQP"), 1)
}

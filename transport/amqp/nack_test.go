package amqp_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// TestABrokerNackOfAPublishIsAnError: when the broker answers a publish
// with basic.nack on a channel that stays open (here a full queue with
// x-overflow=reject-publish), Publish fails saying the broker refused the
// message, and the error is not ErrUnreachable: the broker was there and
// said no, so the relays count the attempt. It caught a publisher that
// took a nack on an open channel for a confirm, so the message was lost
// while the caller was told it was sent.
func TestABrokerNackOfAPublishIsAnError(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("nacked_")
	tr := newTransport(t, amqp.Config{})
	a := newAdmin(t) // its cleanup, registered later, runs first: the queue goes before the exchange
	a.cleanup(topic, "full")
	queue := amqp.QueueName(topic, "full")
	require.NoError(t, a.ch.ExchangeDeclare(amqp.ExchangeName(topic), "fanout", true, false, false, false, nil))
	_, err := a.ch.QueueDeclare(queue, true, false, false, false,
		amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	require.NoError(t, a.ch.QueueBind(queue, "", amqp.ExchangeName(topic), false, nil))
	a.publish(topic, amqp091.Publishing{MessageId: "first", Body: []byte(`{}`)}) // fills the queue

	msg := message.NewMessage("refused-1", []byte(`{}`))
	err = tr.Publisher().Publish(topic, msg)
	require.Error(t, err, "the broker nacked the publish to a full queue")
	require.ErrorContains(t, err, "refused")
	require.ErrorContains(t, err, "basic.nack")
	require.ErrorContains(t, err, msg.UUID)
	require.NotErrorIs(t, err, transport.ErrUnreachable)

	q, err := a.ch.QueueDeclarePassive(queue, true, false, false, false,
		amqp091.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	require.Equal(t, 1, q.Messages, "the queue still holds only the first message")
}

package amqp_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

// TestDeclared lists what the transport's subscribers and publisher
// declared, each once, in the order first declared, for the tests and
// tools that delete a throwaway topology.
func TestDeclared(t *testing.T) {
	t.Parallel()
	a, b, c := testenv.Name("declared_"), testenv.Name("declared_"), testenv.Name("declared_")
	tr := newTransport(t, amqp.Config{})
	exchanges, queues := tr.Declared()
	require.Empty(t, exchanges, "New declares nothing")
	require.Empty(t, queues)
	for _, group := range []string{"g", "h"} {
		sub, err := tr.Subscriber(group, 1)
		require.NoError(t, err)
		for _, topic := range []string{a, b, a} {
			require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
		}
	}
	require.NoError(t, tr.Publisher().Publish(c, message.NewMessage(watermill.NewUUID(), nil)))
	require.NoError(t, tr.PublishMandatory(a, message.NewMessage(watermill.NewUUID(), nil)))
	exchanges, queues = tr.Declared()
	require.Equal(t, []string{amqp.ExchangeName(a), amqp.ExchangeName(b), amqp.ExchangeName(c)}, exchanges)
	require.Equal(t, []string{amqp.QueueName(a, "g"), amqp.QueueName(b, "g"), amqp.QueueName(a, "h"), amqp.QueueName(b, "h")}, queues)
}

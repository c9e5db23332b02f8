package amqptest

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShared(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"sales.OrderPlaced":                          true, // an event topic
		"postroom.CleanupStore":                      true,
		"error":                                      true, // the default error topic
		"error_postroom_errors":                      true, // its error queue
		"error_1a2b3c4d5e6f":                         false,
		"error_1a2b3c4d5e6f_postroom_errors":         false,
		"ep1a2b3c4d5e6f.cmd.conf.Cmd":                false, // a command topic
		"b8138.cmd.postroom.CleanupStore-607b5881":   false, // one CommandTopic shortened
		"topic-28390bac-dc1c-4714-be72-d570108dd3fb": false, // Watermill's tests
	} {
		require.Equal(t, want, shared(name, false), "exchange %s", name)
	}
	for name, want := range map[string]bool{
		"error_postroom_errors":                      true,
		"error_1a2b3c4d5e6f_postroom_errors":         false,
		"sales.OrderPlaced_ep1a2b3c4d5e6f.sales.Ord": false, // a handler's queue of an event topic
		"sales.OrderPlaced_audit":                    false, // any other queue: its group is the test's
	} {
		require.Equal(t, want, shared(name, true), "queue %s", name)
	}
}

// TestCleanupDeletesWhatTheTransportDeclared: once the subtest ends, the
// queues its transport's subscribers declared (classic and quorum) and
// the exchanges of its topics, subscribed to or only published to, are
// gone; a queue a foreign client consumes is deleted once it lets go.
func TestCleanupDeletesWhatTheTransportDeclared(t *testing.T) {
	t.Parallel()
	subscribed, published, quorum := testenv.Name("sub_"), testenv.Name("pub_"), testenv.Name("quorum_")
	t.Run("declare", func(t *testing.T) {
		tr := New(t, amqp.Config{})
		sub, err := tr.Subscriber("g", 1)
		require.NoError(t, err)
		require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(subscribed))
		require.NoError(t, tr.Publisher().Publish(published, message.NewMessage(watermill.NewUUID(), nil)))
		qsub, err := New(t, amqp.Config{QueueType: amqp.QueueQuorum}).Subscriber(transport.ErrorQueueGroup, 1)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err = qsub.Subscribe(ctx, quorum) // consumed until the transport closes
		require.NoError(t, err)
		for _, q := range []string{amqp.QueueName(subscribed, "g"), amqp.QueueName(quorum, transport.ErrorQueueGroup)} {
			require.True(t, exists(t, q, true), q)
		}
	})
	for _, q := range []string{amqp.QueueName(subscribed, "g"), amqp.QueueName(quorum, transport.ErrorQueueGroup)} {
		require.False(t, exists(t, q, true), "queue %s is left", q)
	}
	for _, e := range []string{subscribed, published, quorum} {
		require.False(t, exists(t, amqp.ExchangeName(e), false), "exchange %s is left", e)
	}
}

// TestDeleteTopicWaitsForConsumers: a queue a child process consumed is
// deleted once the child's connection is gone, a moment after the kill.
func TestDeleteTopicWaitsForConsumers(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("child_")
	queue := amqp.QueueName(topic, "g")
	conn, err := amqp091.Dial(testenv.RequireAMQP(t))
	require.NoError(t, err)
	t.Run("child", func(t *testing.T) {
		DeleteTopic(t, topic, "g")
		ch, err := conn.Channel()
		require.NoError(t, err)
		require.NoError(t, ch.ExchangeDeclare(topic, "fanout", true, false, false, false, nil))
		_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
		require.NoError(t, err)
		require.NoError(t, ch.QueueBind(queue, "", topic, false, nil))
		_, err = ch.Consume(queue, "", false, false, false, false, nil)
		require.NoError(t, err)
		t.Cleanup(func() { time.AfterFunc(300*time.Millisecond, func() { _ = conn.Close() }) }) // the kill
	})
	require.False(t, exists(t, queue, true), "queue %s is left", queue)
	require.False(t, exists(t, topic, false), "exchange %s is left", topic)
}

func exists(t *testing.T, name string, queue bool) bool {
	t.Helper()
	conn, err := amqp091.Dial(testenv.RequireAMQP(t))
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	if queue {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	} else {
		err = ch.ExchangeDeclarePassive(name, "fanout", true, false, false, false, nil)
	}
	if isCode(err, amqp091.NotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

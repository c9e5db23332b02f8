package amqp_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := amqp.New(amqp.Config{QueueType: "lazy", Prefetch: -1})
	require.ErrorContains(t, err, "Config.URL is empty")
	require.ErrorContains(t, err, `Config.QueueType "lazy" is unknown`)
	require.ErrorContains(t, err, "Config.Prefetch -1 is negative")
	_, err = amqp.New(amqp.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Prefetch: 70_000})
	require.ErrorContains(t, err, "Config.Prefetch 70000 is over RabbitMQ's 65535", "basic.qos takes 16 bits: 70,000 would be 4,464")

	_, err = amqp.New(amqp.Config{URL: "http://guest:secret@x/"})
	require.ErrorContains(t, err, "amqp: Config.URL: AMQP scheme must be either 'amqp://' or 'amqps://'", "an address of another scheme is refused at New, not at the first dial")
	require.NotContains(t, err.Error(), "secret")
	for _, u := range []string{"amqp://guest:s3cr%zzet@127.0.0.1:5672/", "amqp://guest:secret@127.0.0.1:56x72/", "amqp://guest:secret@[::1/"} {
		_, err = amqp.New(amqp.Config{URL: u})
		require.ErrorContains(t, err, "amqp: Config.URL: ", u)
		require.NotContains(t, err.Error(), "s3cr", "a URL the parser refuses is not repeated: it holds the password")
		require.NotContains(t, err.Error(), "secret", "a URL the parser refuses is not repeated: it holds the password")
	}

	_, err = amqp.New(amqp.Config{URL: "amqp://x/", DeliveryLimit: 5})
	require.ErrorContains(t, err, "applies to quorum queues only")
	_, err = amqp.New(amqp.Config{URL: "amqp://x/", QueueType: amqp.QueueQuorum, DeliveryLimit: -1})
	require.ErrorContains(t, err, "DeliveryLimit -1 is negative")
}

// TestQuorumQueue: with QueueType quorum the subscriber declares a quorum
// queue (RabbitMQ refuses to redeclare it as classic) and messages flow.
func TestQuorumQueue(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("quorum_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	got := consume(t, sub, topic, nil)

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	require.NoError(t, tr.PublishMandatory(topic, msg))
	require.Eventually(t, func() bool { return len(got.all()) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, msg.UUID, got.all()[0].UUID)

	ch, err := a.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(amqp.QueueName(topic, "g"), true, false, false, false,
		amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum, "x-delivery-limit": int64(amqp.DeliveryLimitDefault)})
	require.NoError(t, err, "the queue is a quorum queue with the default delivery limit")
	_, err = ch.QueueDeclare(amqp.QueueName(topic, "g"), true, false, false, false,
		amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeClassic})
	var amqpErr *amqp091.Error
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp091.PreconditionFailed, amqpErr.Code)
}

// TestQuorumDeliveryLimit: a message nacked every time is dropped by
// RabbitMQ after DeliveryLimit redeliveries, instead of looping; the nacks
// that requeue it log a warning, the one that drops it an error.
func TestQuorumDeliveryLimit(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("quorum_")
	newAdmin(t).cleanup(topic, "g")
	logs := &recorder{}
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum, DeliveryLimit: 2, Logger: slog.New(logs)})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	got := consume(t, sub, topic, func(*message.Message) bool { return true })

	require.NoError(t, tr.PublishMandatory(topic, message.NewMessage(watermill.NewUUID(), nil)))
	time.Sleep(settle)
	require.Len(t, got.all(), 3, "the first delivery and DeliveryLimit redeliveries")
	require.Len(t, logs.find(slog.LevelWarn, "amqp: message nacked; RabbitMQ requeues it for immediate redelivery"), 2)
	dropped := logs.find(slog.LevelError, "amqp: message nacked at its queue's delivery limit; RabbitMQ drops it")
	require.Len(t, dropped, 1)
	require.Equal(t, "2", attr(dropped[0], "delivery_limit"))
}

// TestQuorumErrorQueueHasADeliveryLimitNeverReached: the error queue of
// quorum transports is declared with x-delivery-limit 2147483647, so an
// operator browsing it (each look returns the messages to the queue, which
// a limit counts) never makes RabbitMQ drop a failed message. Declared
// without the argument (as an earlier postroom did), RabbitMQ 4.0 to 4.2
// give it a limit of 20. The broker here is 3.10, so the argument is
// checked by redeclaring the queue with it, which RabbitMQ refuses for an
// inequivalent argument.
func TestQuorumErrorQueueHasADeliveryLimitNeverReached(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("errors_")
	a := newAdmin(t)
	a.cleanup(topic, transport.ErrorQueueGroup)
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum, DeliveryLimit: 2})
	sub, err := tr.Subscriber(transport.ErrorQueueGroup, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	queue := amqp.QueueName(topic, transport.ErrorQueueGroup)
	ch, err := a.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false,
		amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum, "x-delivery-limit": int64(math.MaxInt32)})
	require.NoError(t, err, "the error queue has x-delivery-limit 2147483647")
	require.NoError(t, ch.Close())

	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("failed-1", nil)))
	for i := range 6 { // three times the transport's limit
		ch, err := a.conn.Channel()
		require.NoError(t, err)
		var d amqp091.Delivery
		var ok bool
		require.Eventually(t, func() bool {
			d, ok, err = ch.Get(queue, false)
			return err == nil && ok
		}, 5*time.Second, 10*time.Millisecond, "look %d: the failed message is still there", i)
		require.Equal(t, "failed-1", d.MessageId)
		require.NoError(t, ch.Close()) // returns it unacked, as browsing does
	}
}

// TestQuorumErrorQueueFromBefore: an error queue declared by an earlier
// postroom, without x-delivery-limit, is used as it is (RabbitMQ refuses
// to change an existing queue's arguments), with a warning that says what
// to do.
func TestQuorumErrorQueueFromBefore(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("errors_")
	a := newAdmin(t)
	a.cleanup(topic, transport.ErrorQueueGroup)
	ch, err := a.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(amqp.QueueName(topic, transport.ErrorQueueGroup), true, false, false, false,
		amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum})
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	logs := &recorder{}
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum, Logger: slog.New(logs)})
	sub, err := tr.Subscriber(transport.ErrorQueueGroup, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	require.Len(t, logs.find(slog.LevelWarn, "amqp: the error queue has no x-delivery-limit (declared by an earlier postroom); "+
		"on RabbitMQ 4.0 to 4.2 a quorum queue without one drops a failed message after 20 looks at the error queue: "+
		"add a policy with delivery-limit 2147483647 for it, or drain and delete it so that it is declared again"), 1)
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("failed-1", nil)), "the error topic reaches the queue")
}

// TestQuorumOverClassicQueue: subscribing with QueueType quorum to a queue
// that exists as a classic queue fails with an error that says so.
func TestQuorumOverClassicQueue(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("quorum_")
	newAdmin(t).cleanup(topic, "g")
	classic, err := newTransport(t, amqp.Config{}).Subscriber("g", 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = classic.Close() })
	require.NoError(t, classic.(message.SubscribeInitializer).SubscribeInitialize(topic))

	quorum, err := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum}).Subscriber("g", 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = quorum.Close() })
	err = quorum.(message.SubscribeInitializer).SubscribeInitialize(topic)
	require.ErrorContains(t, err, "a classic queue cannot be redeclared as quorum")
	require.ErrorContains(t, err, amqp.QueueName(topic, "g"))
	var amqpErr *amqp091.Error
	require.True(t, errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed, "%v", err)

	_, err = quorum.Subscribe(context.Background(), topic)
	require.ErrorContains(t, err, "a classic queue cannot be redeclared as quorum")
}

// TestPrefetch: a subscription holding one unacked message has taken
// Prefetch messages off the queue (the others stay ready).
func TestPrefetch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prefetch, wantTaken int
	}{{0, amqp.PrefetchDefault}, {3, 3}} {
		topic := testenv.Name("prefetch_")
		a := newAdmin(t)
		a.cleanup(topic, "g")
		tr := newTransport(t, amqp.Config{Prefetch: c.prefetch})
		sub, err := tr.Subscriber("g", 1)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		for range 5 {
			require.NoError(t, tr.PublishMandatory(topic, message.NewMessage(watermill.NewUUID(), nil)))
		}
		first := <-ch // held, not acked
		require.NotNil(t, first)
		require.Eventually(t, func() bool {
			q, err := a.ch.QueueDeclarePassive(amqp.QueueName(topic, "g"), true, false, false, false, nil)
			return err == nil && q.Messages == 5-c.wantTaken
		}, 5*time.Second, 20*time.Millisecond, "prefetch %d", c.prefetch)
		cancel()
		require.NoError(t, sub.Close())
		for range ch {
		}
	}
}

// TestQuorumOtherDeliveryLimit: an existing quorum queue keeps its delivery
// limit; subscribing with another one fails with an error that says so.
func TestQuorumOtherDeliveryLimit(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("quorum_")
	newAdmin(t).cleanup(topic, "g")
	first, err := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum}).Subscriber("g", 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })
	require.NoError(t, first.(message.SubscribeInitializer).SubscribeInitialize(topic))

	other, err := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum, DeliveryLimit: 5}).Subscriber("g", 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	err = other.(message.SubscribeInitializer).SubscribeInitialize(topic)
	require.ErrorContains(t, err, "DeliveryLimit 5")
	require.ErrorContains(t, err, "x-delivery-limit")
}

// TestReachNamesBrokerAndVhostWithoutCredentials: the reach stored with a
// delayed delivery names the broker and vhost, never the password.
func TestReachNamesBrokerAndVhostWithoutCredentials(t *testing.T) {
	for url, want := range map[string]string{
		"amqp://guest:secret@LocalHost:5672/":  "amqp://localhost:5672/%2F",
		"amqp://guest:secret@localhost":        "amqp://localhost:5672/%2F",
		"amqp://u:p@rabbit.internal/orders":    "amqp://rabbit.internal:5672/orders",
		"amqps://u:p@rabbit.internal:5671/%2f": "amqps://rabbit.internal:5671/%2F",
	} {
		tr, err := amqp.New(amqp.Config{URL: url})
		require.NoError(t, err)
		require.Equal(t, want, tr.Capabilities().Reach, url)
		require.NotContains(t, tr.Capabilities().Reach, "secret")
	}
}

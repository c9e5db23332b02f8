package amqp_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/transporttest"
)

// features is what the transport promises, not what makes a test pass.
var features = tests.Features{
	// Each group has its own durable queue of a topic; the group's
	// subscriptions compete for it.
	ConsumerGroups: true,
	// At least once: a nacked message, or one unacked when its channel
	// closes, is delivered again.
	ExactlyOnceDelivery: false,
	// A queue is FIFO and one subscription holds one message at a time
	// (prefetch 1), so it sees them in the order published.
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	// Durable queues and persistent messages: a message waits in its queue
	// for any later subscriber of the group, and survives a broker restart.
	Persistent: true,
	// Restarting the shared local broker would disturb every other test
	// running on it; reconnects are proven by bus TestBrokerConnectionsClosedMidRun.
	RestartServiceCommand: nil,
	RequireSingleInstance: false,
	// A queue holds what its group has not acked, not what it has.
	NewSubscriberReceivesOldMessages: false,
	// A delivered message carries the subscription's context.
	ContextPreserved: false,
}

func newPubSub(t *testing.T) (message.Publisher, message.Subscriber) {
	return newGroupPubSub(t, "default")
}

// newGroupPubSub connects a new transport (so each call is a new
// publisher, as Watermill's tests expect) and a subscriber of group.
func newGroupPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(t)})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	t.Cleanup(func() { _ = tr.Close() })
	sub, err := tr.Subscriber(group, 1)
	require.NoError(t, err)
	return tr.Publisher(), sub
}

// TestPubSub runs Watermill's universal Pub/Sub tests against the
// transport as the bus uses it: postroom's marshaler, queue names and
// subscriber wrapper.
func TestPubSub(t *testing.T) {
	tests.TestPubSub(t, features, newPubSub, newGroupPubSub)
}

// TestContract runs postroom's transport contract (transporttest) on
// classic and on quorum queues, which tell redeliveries differently.
func TestContract(t *testing.T) {
	for _, queues := range []amqp.QueueType{amqp.QueueClassic, amqp.QueueQuorum} {
		t.Run(string(queues), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) transport.Transport {
				tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(t), QueueType: queues})
				require.NoError(t, err)
				amqptest.Cleanup(t, tr)
				t.Cleanup(func() { _ = tr.Close() })
				return tr
			})
		})
	}
}

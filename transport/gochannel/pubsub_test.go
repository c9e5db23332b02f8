package gochannel_test

import (
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
	"github.com/postroom/postroom/transport/transporttest"
)

// features is what the transport promises, not what makes a test pass.
var features = tests.Features{
	// Each group has its own queue of a topic; the group's subscriptions
	// share it.
	ConsumerGroups: true,
	// At least once: a nacked message is delivered again, and so is one
	// held by a subscription whose subscriber or transport closes before
	// it is acked (an ack after its subscription's context ended still
	// settles it).
	ExactlyOnceDelivery: false,
	// A queue is FIFO and a nacked or returned message goes back to its
	// head, so one subscription sees the messages in the order published.
	// Competing subscriptions each hold one at a time, so between them the
	// order of handling is not the order of publishing.
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	// Everything is in the process's memory: nothing survives it. (Within
	// one Transport a queue does outlive its subscribers; see
	// TestQueueOutlivesItsSubscribers.)
	Persistent: false,
	// No broker to restart.
	RestartServiceCommand: nil,
	// Publishers and subscribers made by one Transport work together, any
	// number of them: the Transport is the broker.
	RequireSingleInstance: false,
	// A queue keeps messages until a subscription of its group acks them;
	// a new subscription does not get what was already acked.
	NewSubscriberReceivesOldMessages: false,
	// A delivered message carries the subscription's context, not the
	// publisher's.
	ContextPreserved: false,
}

// transports gives each test its own Transport (the broker), closed when the
// test ends; every constructor call of the test makes a new publisher and
// subscriber on it.
var transports sync.Map // *testing.T -> *gochannel.Transport

func transportOf(t *testing.T) *gochannel.Transport {
	if got, ok := transports.Load(t); ok {
		return got.(*gochannel.Transport)
	}
	tr := gochannel.New(gochannel.Config{})
	got, loaded := transports.LoadOrStore(t, tr)
	if !loaded {
		t.Cleanup(func() {
			transports.Delete(t)
			require.NoError(t, tr.Close())
		})
	}
	return got.(*gochannel.Transport)
}

func newPubSub(t *testing.T) (message.Publisher, message.Subscriber) {
	return newGroupPubSub(t, "default")
}

func newGroupPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	tr := transportOf(t)
	sub, err := tr.Subscriber(group, 1)
	require.NoError(t, err)
	return tr.Publisher(), sub
}

func TestPubSub(t *testing.T) {
	tests.TestPubSub(t, features, newPubSub, newGroupPubSub)
}

// TestQueueOutlivesItsSubscribers runs Watermill's test that no message is
// lost while subscribers come and go. Watermill runs it only for Features
// with Persistent, which gochannel does not declare (nothing survives the
// process), but it promises what the test checks: a group's queue, and the
// messages a closed subscription held, stay in the Transport.
func TestQueueOutlivesItsSubscribers(t *testing.T) {
	t.Parallel()
	f := features
	f.Persistent = true
	tests.TestContinueAfterSubscribeClose(t, tests.TestContext{TestID: tests.NewTestID(), Features: f}, newPubSub)
}

// TestContract runs postroom's transport contract (transporttest).
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		tr := gochannel.New(gochannel.Config{})
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		return tr
	})
}

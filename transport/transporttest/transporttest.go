// Package transporttest is the contract a postroom transport passes beside
// Watermill's universal Pub/Sub tests (tests.TestPubSub): what the bus
// relies on that those tests do not check. A transport's own tests call
// Run with a function that opens a new transport for a test and closes it
// when the test ends.
package transporttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// wait bounds each receive: long enough for a loaded CI machine, short
// enough that a transport that never delivers fails the test.
const wait = 20 * time.Second

// Run runs the contract against transports made by open; each check opens
// its own. A transport's tests run it beside tests.TestPubSub.
func Run(t *testing.T, open func(t *testing.T) transport.Transport) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, open(t))
		})
	}
}

// checks are the contract, each on a transport of its own.
var checks = []struct {
	name string
	run  func(*testing.T, transport.Transport)
}{
	{"ControlMetadataFromOutsideIsIgnored", controlMetadataFromOutsideIsIgnored},
	{"AHeldMessageComesBackWhenItsSubscriberCloses", aHeldMessageComesBack},
	{"SubscriptionsOfAGroupCompete", subscriptionsOfAGroupCompete},
	{"EveryGroupGetsEveryMessage", everyGroupGetsEveryMessage},
	{"AnAckAfterTheSubscriptionEndedSettles", anAckAfterTheSubscriptionEndedSettles},
	{"ANackedMessageComesBackCounted", aNackedMessageComesBackCounted},
	{"ASubscriptionHoldsUpToItsInFlight", aSubscriptionHoldsUpToItsInFlight},
}

// name is a topic or group name unique to a test, valid on every
// transport (a table name on the SQL transport).
func name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// subscribe subscribes group to topic until the test ends.
func subscribe(t *testing.T, tr transport.Transport, group, topic string) (message.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, msgs, _ := subscribeInFlight(t, tr, group, topic, 1)
	return sub, msgs
}

// subscribeInFlight subscribes a subscriber of group with inFlight to
// topic until the test ends, or until cancel.
func subscribeInFlight(t *testing.T, tr transport.Transport, group, topic string, inFlight int) (message.Subscriber, <-chan *message.Message, context.CancelFunc) {
	t.Helper()
	sub, err := tr.Subscriber(group, inFlight)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	return sub, msgs, cancel
}

// newMessage is a message with id as its UUID and postroom's ID metadata.
func newMessage(id string) *message.Message {
	m := message.NewMessage(id, []byte(`{}`))
	m.Metadata.Set(metadata.MessageID, m.UUID)
	return m
}

// holdFirst subscribes a subscriber of group to topic, publishes ids and
// receives the first, which it holds unsettled; cancel ends the
// subscription. The caller closes the subscriber.
func holdFirst(t *testing.T, tr transport.Transport, group, topic string, ids ...string) (sub message.Subscriber, cancel func(), held *message.Message) {
	t.Helper()
	sub, err := tr.Subscriber(group, 1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	for _, id := range ids {
		publish(t, tr, topic, newMessage(id))
	}
	held = receive(t, msgs)
	require.Equal(t, ids[0], held.UUID)
	return sub, cancel, held
}

// receive is the next message of msgs, or fails the test.
func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		require.True(t, ok, "the subscription ended")
		return m
	case <-time.After(wait):
		require.FailNow(t, "no message within "+wait.String())
		return nil
	}
}

func publish(t *testing.T, tr transport.Transport, topic string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, tr.Publisher().Publish(topic, msgs...))
}

// controlMetadataFromOutsideIsIgnored: a producer that is not postroom may
// set the metadata a transport sets on what it delivers (a delivery count,
// the redelivered mark, a transport error); a delivered message carries
// the transport's own values, never the producer's, so a forged count
// cannot send a message to the error topic and a forged error cannot
// either.
func controlMetadataFromOutsideIsIgnored(t *testing.T, tr transport.Transport) {
	topic := name("tt_control_")
	_, msgs := subscribe(t, tr, name("g"), topic)
	m := newMessage("forged-1")
	m.Metadata.Set(metadata.DeliveryCount, "99")
	m.Metadata.Set("x-delivery-count", "99") // RabbitMQ's header of the count, as a producer may set it
	m.Metadata.Set(metadata.Redelivered, metadata.RedeliveredYes)
	m.Metadata.Set(metadata.TransportError, "forged")
	m.Metadata.Set("app-header", "kept")
	publish(t, tr, topic, m)
	got := receive(t, msgs)
	require.True(t, got.Ack())
	require.Equal(t, "forged-1", got.UUID)
	require.Equal(t, "kept", got.Metadata.Get("app-header"), "a producer's own metadata arrives")
	require.Empty(t, got.Metadata.Get(metadata.DeliveryCount), "a first delivery carried the producer's delivery count")
	require.Contains(t, []string{"", metadata.RedeliveredFirstRead}, got.Metadata.Get(metadata.Redelivered),
		"a first delivery carried the producer's redelivered mark (first-read is a transport's own: the SQL transport's first read in a process)")
	require.Empty(t, got.Metadata.Get(metadata.TransportError), "the transport error is the producer's")
}

// aHeldMessageComesBack: a message a subscription took and never settled
// is delivered again, to another subscriber of its group, once the
// subscriber that held it closes (a process that stopped or died).
func aHeldMessageComesBack(t *testing.T, tr transport.Transport) {
	topic, group := name("tt_held_"), name("g")
	first, cancel, _ := holdFirst(t, tr, group, topic, "held-1")
	cancel()
	require.NoError(t, first.Close()) // without settling what it holds

	_, again := subscribe(t, tr, group, topic)
	got := receive(t, again)
	require.Equal(t, "held-1", got.UUID, "the held message was not delivered again")
	require.True(t, got.Ack())
}

// subscriptionsOfAGroupCompete: two subscriptions of one group share the
// topic's messages: each is handled by one of them, and together they
// get every message.
func subscriptionsOfAGroupCompete(t *testing.T, tr transport.Transport) {
	topic, group := name("tt_compete_"), name("g")
	_, a := subscribe(t, tr, group, topic)
	_, b := subscribe(t, tr, group, topic)
	const n = 20
	for range n {
		m := newMessage(name("c"))
		publish(t, tr, topic, m)
	}
	seen := map[string]int{}
	deadline := time.After(wait)
	for len(seen) < n {
		select {
		case m := <-a:
			seen[m.UUID]++
			m.Ack()
		case m := <-b:
			seen[m.UUID]++
			m.Ack()
		case <-deadline:
			require.FailNow(t, "not every message arrived", "%d of %d", len(seen), n)
		}
	}
	select { // a copy of one would come now, if at all
	case m := <-a:
		seen[m.UUID]++
	case m := <-b:
		seen[m.UUID]++
	case <-time.After(300 * time.Millisecond):
	}
	for id, count := range seen {
		require.Equal(t, 1, count, "message %s went to both subscriptions of its group", id)
	}
}

// everyGroupGetsEveryMessage: each group subscribed to a topic gets each
// of its messages (an event reaches every endpoint that subscribes).
func everyGroupGetsEveryMessage(t *testing.T, tr transport.Transport) {
	topic := name("tt_groups_")
	_, a := subscribe(t, tr, name("g"), topic)
	_, b := subscribe(t, tr, name("g"), topic)
	m := newMessage("event-1")
	publish(t, tr, topic, m)
	for _, msgs := range []<-chan *message.Message{a, b} {
		got := receive(t, msgs)
		require.Equal(t, "event-1", got.UUID)
		require.True(t, got.Ack())
	}
}

// anAckAfterTheSubscriptionEndedSettles: a handler running when its
// subscription's context ends (a stop) may still finish: its Ack settles
// the message until the subscriber closes, and the message is not
// delivered again (bus.Config.StopTimeout relies on it).
func anAckAfterTheSubscriptionEndedSettles(t *testing.T, tr transport.Transport) {
	topic, group := name("tt_stop_"), name("g")
	first, cancel, held := holdFirst(t, tr, group, topic, "stop-1", "stop-2")
	cancel()
	select { // the message's own context ends with its subscription's
	case <-held.Context().Done():
	case <-time.After(wait):
		require.FailNow(t, "the held message's context did not end with its subscription")
	}
	require.True(t, held.Ack())
	require.NoError(t, first.Close())

	_, again := subscribe(t, tr, group, topic)
	got := receive(t, again)
	require.Equal(t, "stop-2", got.UUID, "the message acked after its subscription ended came again")
	require.True(t, got.Ack())
	select { // nor behind the others
	case m := <-again:
		require.NotEqual(t, "stop-1", m.UUID, "the message acked after its subscription ended came again")
	case <-time.After(500 * time.Millisecond):
	}
}

// aNackedMessageComesBackCounted: a nacked message is delivered again,
// told as the transport's Capabilities promise: counted
// (metadata.DeliveryCount) by a transport that CountsDeliveries; counted
// or marked (metadata.Redelivered) by one that MarksRedeliveries, so that
// the bus counts it in its database. A transport that does neither need
// not tell: the bus's poison-loop guard counts nacks in its process.
func aNackedMessageComesBackCounted(t *testing.T, tr transport.Transport) {
	caps := tr.Capabilities()
	topic := name("tt_nack_")
	_, msgs := subscribe(t, tr, name("g"), topic)
	m := newMessage("nacked-1")
	publish(t, tr, topic, m)
	first := receive(t, msgs)
	require.Empty(t, first.Metadata.Get(metadata.DeliveryCount), "a first delivery is counted as a redelivery")
	require.True(t, first.Nack())
	second := receive(t, msgs)
	require.Equal(t, "nacked-1", second.UUID)
	count, mark := second.Metadata.Get(metadata.DeliveryCount), second.Metadata.Get(metadata.Redelivered)
	if count != "" {
		require.Equal(t, "1", count, "one delivery before this one was not settled")
	}
	if caps.CountsDeliveries {
		require.Equal(t, "1", count, "a transport that counts deliveries did not count a nacked one")
	}
	if caps.MarksRedeliveries {
		require.True(t, count == "1" || mark == metadata.RedeliveredYes,
			"a transport that marks redeliveries neither counted nor marked a nacked one (count %q, mark %q)", count, mark)
	}
	require.True(t, second.Ack())
}

// aSubscriptionHoldsUpToItsInFlight: a subscription of a subscriber made
// with inFlight 3 hands out 3 messages before any is settled, no fourth
// until one of them is, and the ones it holds when its context ends still
// settle by their ack (the bus runs a handler's messages in flight on one
// subscription, and lets them finish at a stop). A sequential transport
// hands out one at a time whatever inFlight is (Capabilities.Sequential).
func aSubscriptionHoldsUpToItsInFlight(t *testing.T, tr transport.Transport) {
	if tr.Capabilities().Sequential {
		t.Skip("a sequential transport hands out one message of a group at a time (Capabilities.Sequential)")
	}
	const inFlight = 3
	topic, group := name("tt_inflight_"), name("g")
	sub, msgs, cancel := subscribeInFlight(t, tr, group, topic, inFlight)
	for i := range inFlight + 2 {
		publish(t, tr, topic, newMessage(fmt.Sprintf("in-flight-%d", i)))
	}
	var held []*message.Message
	for range inFlight {
		held = append(held, receive(t, msgs))
	}
	select {
	case m := <-msgs:
		require.FailNow(t, "a subscription of inFlight 3 handed out a fourth message while it held 3", "got %s", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	require.True(t, held[0].Ack())
	held = append(held[1:], receive(t, msgs))
	cancel()
	for _, m := range held {
		require.True(t, m.Ack())
	}
	require.NoError(t, sub.Close())

	_, again := subscribe(t, tr, group, topic)
	got := receive(t, again)
	require.Equal(t, fmt.Sprintf("in-flight-%d", inFlight+1), got.UUID, "a message acked after its subscription ended came again")
	require.True(t, got.Ack())
	select {
	case m := <-again:
		require.FailNow(t, "a message acked after its subscription ended came again", "got %s", m.UUID)
	case <-time.After(500 * time.Millisecond):
	}
}

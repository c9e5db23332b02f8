package amqp_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// TestAConnectionLostMidPublishIsUnreachable: the publisher's connection
// is cut while a publish waits for the broker's confirm (a broker restart
// or a network flap as the client sees it). The publish fails with
// transport.ErrUnreachable, which the outbox's relay and the delayed
// relay do not count against the message. Failing as "the channel closed
// before the broker confirmed", counted as a refusal, five flaps
// mid-publish would move a sound message to the error topic.
func TestAConnectionLostMidPublishIsUnreachable(t *testing.T) {
	proxy, proxied := amqptest.NewProxy(t)
	topic := testenv.Name("lost_")
	newAdmin(t).cleanup(topic)
	tr, err := amqp.New(amqp.Config{URL: proxied})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	t.Cleanup(func() { _ = tr.Close() })
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("first", nil)), "connected and declared")

	proxy.Freeze(true) // the next publish goes out, its confirm never comes
	errc := make(chan error, 1)
	go func() { errc <- tr.Publisher().Publish(topic, message.NewMessage("second", nil)) }()
	select {
	case err := <-errc:
		t.Fatalf("the publish ended before the cut: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	proxy.Drop()
	proxy.Freeze(false)
	select {
	case err = <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("the publish did not end when its connection was cut")
	}
	require.Error(t, err)
	require.ErrorIs(t, err, transport.ErrUnreachable, "%v", err)
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("third", nil)), "the next publish reconnects")
}

// TestAChannelTheBrokerClosedIsARefusal: the broker closes the
// publisher's channel on a publish (here to an exchange deleted since the
// publisher declared it: 404 NOT_FOUND) while the connection stays up.
// That may be the message's doing and is not transport.ErrUnreachable: the
// relays count it, so a message the broker always refuses is moved aside.
func TestAChannelTheBrokerClosedIsARefusal(t *testing.T) {
	topic := testenv.Name("refused_")
	a := newAdmin(t)
	a.cleanup(topic)
	tr := newTransport(t, amqp.Config{})
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("first", nil)), "connected and declared")
	require.NoError(t, a.ch.ExchangeDelete(amqp.ExchangeName(topic), false, false))
	err := tr.Publisher().Publish(topic, message.NewMessage("second", nil))
	require.Error(t, err, "published to a deleted exchange")
	require.NotErrorIs(t, err, transport.ErrUnreachable, "%v", err)
}

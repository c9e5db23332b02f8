package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestADelayedMessageTheBrokerRefusesHoldsNothingBack: three delayed
// commands fall due together and the broker refuses the middle one every
// time (as a message over its size limit). The first is delivered once,
// the third is delivered, and the refused one goes to the error topic
// after a few attempts. Before, the refusal rolled back the whole batch:
// the first was sent again at every tick, the third never (found by a
// review).
func TestADelayedMessageTheBrokerRefusesHoldsNothingBack(t *testing.T) {
	tr := refusingOne{Transport: gochannel.New(gochannel.Config{}), id: "poison", errorTopic: "error"}
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, DB: testenv.SQLite(t),
		DelayedPollInterval: 20 * time.Millisecond, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	var mu sync.Mutex
	got := map[string]int{}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
		mu.Lock()
		got[bus.MessageID(ctx)]++
		mu.Unlock()
		return nil
	}))
	ep := start(t, b, "error")
	due := time.Now().Add(100 * time.Millisecond)
	for _, id := range []string{"first", "poison", "third"} {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: id}, bus.DeliverAt(due), bus.WithMessageID(id)))
	}
	select {
	case failed := <-ep.errors:
		require.Equal(t, "poison", failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "refused")
	case <-time.After(20 * time.Second):
		t.Fatal("the refused message did not reach the error topic")
	}
	waitFor(t, "the third message", func() bool { mu.Lock(); defer mu.Unlock(); return got["third"] == 1 })
	time.Sleep(200 * time.Millisecond) // ten more ticks of the relay
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"first": 1, "third": 1}, got)
}

// refusingOne refuses every publish of the message id, except to the error topic.
type refusingOne struct {
	transport.Transport
	id, errorTopic string
}

func (t refusingOne) Publisher() message.Publisher {
	return refusingOnePublisher{t.Transport.Publisher(), t}
}

type refusingOnePublisher struct {
	message.Publisher
	t refusingOne
}

func (p refusingOnePublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.t.id && topic != p.t.errorTopic {
			return errors.New("broker refused the message: over its size limit")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

package outbox

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
)

// TestAnUnreachableBrokerDoesNotCountAgainstTheMessage: the broker cannot
// be reached for more attempts than MaxRelayAttempts, but takes the error
// topic's copy the moment it comes back (a heal landing between a failed
// attempt and the copy, or a flapping broker). The message is relayed to
// its topic, not moved aside: an attempt that could not reach the broker
// says nothing about the message. Counting the attempts of the outage
// would send the message to the error topic.
func TestAnUnreachableBrokerDoesNotCountAgainstTheMessage(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &flappingBroker{unreachableFor: 8}
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, ErrorTopic: "errors"})
			require.NoError(t, err)
			_, stop := relayOrders(t, db, o, 1)
			deadline := time.Now().Add(20 * time.Second)
			for {
				orders, moved := dest.got()
				require.Empty(t, moved, "moved to the error topic after attempts that could not reach the broker")
				if len(orders) == 1 {
					break
				}
				require.True(t, time.Now().Before(deadline), "not relayed after the outage")
				time.Sleep(10 * time.Millisecond)
			}
			stop()
			_, moved := dest.got()
			require.Empty(t, moved)
		})
	}
}

// flappingBroker cannot be reached for its first unreachableFor publishes
// to "orders", and takes every publish to another topic.
type flappingBroker struct {
	unreachableFor int

	mu            sync.Mutex
	tried         int
	orders, moved []string
}

func (b *flappingBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if topic != "orders" {
		for _, m := range msgs {
			b.moved = append(b.moved, m.UUID)
		}
		return nil
	}
	if b.tried++; b.tried <= b.unreachableFor {
		return transport.Unreachable(errors.New("dial tcp 127.0.0.1:5672: connect: connection refused"))
	}
	for _, m := range msgs {
		b.orders = append(b.orders, m.UUID)
	}
	return nil
}

func (b *flappingBroker) Close() error { return nil }

func (b *flappingBroker) got() (orders, moved []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.orders...), append([]string(nil), b.moved...)
}

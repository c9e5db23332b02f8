package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
)

// TestAnOutageMidBatchLosesNothing: the broker takes the first message of
// a batch the relay read, then refuses everything for longer than the
// relay's ack deadline (30 s in production, shortened here), then comes
// back: every message is relayed. On MySQL/MariaDB watermill-sql's ack
// marked every row of the batch at the deadline, so the rows behind the
// refused one were never relayed, without a log line (found by a review).
func TestAnOutageMidBatchLosesNothing(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &outageBroker{up: 1, downFor: 1500 * time.Millisecond}
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, ackDeadline: 300 * time.Millisecond})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var want []string
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				var msgs []*message.Message
				for i := range 5 {
					want = append(want, fmt.Sprintf("m%d", i))
					msgs = append(msgs, message.NewMessage(want[i], []byte("{}")))
				}
				return o.Publish(ctx, tx, "orders", msgs...)
			}))
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			deadline := time.Now().Add(15 * time.Second)
			for !slices.Equal(dest.relayed(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("relayed %v of %v after the outage", dest.relayed(), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.NoError(t, o.Close())
			cancel()
			<-done
		})
	}
}

// outageBroker takes up messages, then refuses every publish for downFor,
// then takes everything again.
type outageBroker struct {
	up      int
	downFor time.Duration

	mu        sync.Mutex
	downUntil time.Time
	got       []string
}

func (b *outageBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) == b.up && b.downUntil.IsZero() {
		b.downUntil = time.Now().Add(b.downFor)
	}
	if len(b.got) >= b.up && time.Now().Before(b.downUntil) {
		return errors.New("broker down")
	}
	for _, m := range msgs {
		if topic != "orders" {
			return fmt.Errorf("published to %s", topic)
		}
		b.got = append(b.got, m.UUID)
	}
	return nil
}

func (b *outageBroker) Close() error { return nil }

func (b *outageBroker) relayed() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

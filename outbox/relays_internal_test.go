package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
)

// countingBroker counts the publishes of each message ID.
type countingBroker struct {
	mu  sync.Mutex
	got map[string]int
}

func (b *countingBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		b.got[m.UUID]++
	}
	return nil
}
func (b *countingBroker) Close() error { return nil }

// TestTwoRelaysRelayEveryRowOnce: two relays on one database, eight
// handlers committing 800 outbox rows out of order: every row is relayed,
// none twice (on MySQL the relay reads at READ COMMITTED, which locks the
// rows it reads and no gap).
func TestTwoRelaysRelayEveryRowOnce(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &countingBroker{got: map[string]int{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var relays []*Outbox
			var wg sync.WaitGroup
			for range 2 {
				o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond})
				require.NoError(t, err)
				relays = append(relays, o)
				wg.Add(1)
				go func() { defer wg.Done(); _ = o.Run(ctx) }()
			}
			const writers, per = 8, 100
			var wwg sync.WaitGroup
			for w := range writers {
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					for i := range per {
						id := fmt.Sprintf("w%d-%d", w, i)
						err := db.Transaction(func(tx *gorm.DB) error {
							if err := relays[0].Publish(ctx, tx, "orders", message.NewMessage(id, []byte("{}"))); err != nil {
								return err
							}
							time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
							return nil
						})
						if err != nil {
							t.Errorf("%s: %v", id, err)
						}
					}
				}()
			}
			wwg.Wait()
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				dest.mu.Lock()
				n := len(dest.got)
				dest.mu.Unlock()
				if n == writers*per {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Second)
			dest.mu.Lock()
			dups := 0
			for _, c := range dest.got {
				if c > 1 {
					dups++
				}
			}
			t.Logf("%s: relayed %d distinct of %d, %d duplicated", store.Name, len(dest.got), writers*per, dups)
			require.Len(t, dest.got, writers*per, "every row relayed")
			require.Zero(t, dups, "none twice")
			dest.mu.Unlock()
			cancel()
			for _, o := range relays {
				_ = o.Close()
			}
			wg.Wait()
		})
	}
}

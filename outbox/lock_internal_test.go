package outbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
)

// hangingBroker holds every publish until its message's context ends, as a
// RabbitMQ publish whose confirm does not come (a publisher blocked by a
// memory or disk alarm), then fails it.
type hangingBroker struct{ calls atomic.Int32 }

func (b *hangingBroker) Publish(_ string, msgs ...*message.Message) error {
	b.calls.Add(1)
	<-msgs[0].Context().Done()
	return msgs[0].Context().Err()
}
func (*hangingBroker) Close() error { return nil }

// TestAHangingPublishDoesNotBlockHandlers: while the relay waits for a
// broker that does not confirm, handlers still write to the outbox at
// once. On MariaDB a relay read that locks the gap where new outbox rows
// go for its whole batch makes a handler's insert wait up to the ack
// deadline, and with innodb_lock_wait_timeout under it fail ("Lock wait
// timeout exceeded").
func TestAHangingPublishDoesNotBlockHandlers(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &hangingBroker{}
			// StopTimeout: the stop at the end cuts the hanging publish at once.
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, ackDeadline: 10 * time.Second,
				StopTimeout: -1})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			t.Cleanup(func() {
				cancel()
				_ = o.Close()
				<-done
			})
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return o.Publish(ctx, tx, "orders", message.NewMessage(testenv.Name("first-"), []byte("{}")))
			}))
			go func() { done <- o.Run(ctx) }()
			require.Eventually(t, func() bool { return dest.calls.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
			time.Sleep(200 * time.Millisecond) // the relay holds its read, waiting for the confirm
			for range 3 {
				began := time.Now()
				err := db.Transaction(func(tx *gorm.DB) error {
					if store.Name == "mariadb" {
						if err := tx.Exec("SET SESSION innodb_lock_wait_timeout = 3").Error; err != nil {
							return err
						}
					}
					return o.Publish(ctx, tx, "orders", message.NewMessage(testenv.Name("h-"), []byte("{}")))
				})
				require.NoError(t, err)
				require.Less(t, time.Since(began), 2*time.Second, "a handler's outbox insert waits for the relay's publish")
			}
		})
	}
}

package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
)

// TestAStopCutsAHangingPublishAtStopTimeout: a stop waits for the publish
// in flight only StopTimeout, not the ack deadline: a broker that never
// confirms holds Run's return 300 ms, and the message stays in the
// outbox for the next relay.
func TestAStopCutsAHangingPublishAtStopTimeout(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &hangingBroker{}
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, StopTimeout: 300 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return o.Publish(context.Background(), tx, "orders", message.NewMessage(testenv.Name("m-"), []byte("{}")))
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			require.Eventually(t, func() bool { return dest.calls.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
			began := time.Now()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10 s of its context's end (the ack deadline is 30 s)")
			}
			took := time.Since(began)
			require.GreaterOrEqual(t, took, 300*time.Millisecond, "the stop waited for the publish in flight")
			require.NoError(t, o.Close())
			backlog, err := o.Backlog(context.Background())
			require.NoError(t, err)
			require.EqualValues(t, 1, backlog.Messages, "the message cut short stays in the outbox")
		})
	}
}

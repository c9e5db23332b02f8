package bus

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
)

// TestPoisonCountCountsMarkedDeliveriesAndForgetsSettled, on each store:
// an unmarked delivery is a first one (no row); each marked delivery is
// counted; a nack keeps the count; a settled delivery that was counted, or
// that its transport counted (the SQL transport counts its own re-reads
// after a first read counted here), or that was moved aside, deletes it;
// so does one settled in the process that counted an earlier delivery.
func TestPoisonCountCountsMarkedDeliveriesAndForgetsSettled(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			c, err := newPoisonCount(db, time.Now, make(chan struct{}))
			require.NoError(t, err)
			consumer := testenv.Name("consumer-")
			rows := func(id string) (n int64) {
				require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_deliveries WHERE consumer = ? AND message_id = ?", consumer, id).Row().Scan(&n))
				return n
			}
			delivery := func(id, key, value string) *message.Message {
				m := message.NewMessage(id, nil)
				if key != "" {
					m.Metadata.Set(key, value)
				}
				return m
			}
			previous := func(m *message.Message) (int, bool) {
				n, counted, release, err := c.previous(m, "g", consumer)
				require.NoError(t, err)
				release()
				return n, counted
			}

			n, counted := previous(delivery("a", "", ""))
			require.Equal(t, []any{0, false, int64(0)}, []any{n, counted, rows("a")}, "a first delivery costs nothing")

			for want := 1; want <= 3; want++ {
				n, counted = previous(delivery("a", metadata.Redelivered, metadata.RedeliveredYes))
				require.Equal(t, []any{want, true}, []any{n, counted})
				require.NoError(t, c.ended(delivery("a", metadata.Redelivered, metadata.RedeliveredYes), "g", consumer, true, true, false))
				require.EqualValues(t, 1, rows("a"), "a nack keeps the count")
			}
			n, _ = previous(delivery("b", metadata.Redelivered, metadata.RedeliveredFirstRead))
			require.Zero(t, n, "a first read may be a first delivery")

			other, err := newPoisonCount(db, time.Now, make(chan struct{})) // another process
			require.NoError(t, err)
			require.NoError(t, other.ended(delivery("a", "", ""), "g", consumer, false, false, false))
			require.EqualValues(t, 1, rows("a"), "a first delivery settled in another process deletes nothing")
			require.NoError(t, other.ended(delivery("a", metadata.DeliveryCount, "1"), "g", consumer, false, false, false))
			require.Zero(t, rows("a"), "settled after a redelivery its transport counted")

			n, _ = previous(delivery("c", metadata.Redelivered, metadata.RedeliveredYes))
			require.Equal(t, 1, n)
			require.NoError(t, c.ended(delivery("c", "", ""), "g", consumer, false, false, false))
			require.Zero(t, rows("c"), "settled in the process that counted it, even on a delivery not counted")
			require.NoError(t, c.ended(delivery("b", "", ""), "g", consumer, false, false, true))
			require.Zero(t, rows("b"), "moved aside")
		})
	}
}

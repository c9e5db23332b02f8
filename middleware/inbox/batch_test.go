package inbox_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// TestABatchClaimsKeysBySourceAndConsumer on every store: ClaimAll, the
// inbox of HandleBatch, tells keys apart by consumer, source and message
// ID, within the batch as in the table: one ID from two sources, or for
// two consumers, is new for each; the same key twice is new once. It
// catches a batch that drops the source from its in-batch key, which the
// bus's checks see only when both messages land in one batch (the second
// source's message then goes to the error topic, "the key's row went away
// while it was read").
func TestABatchClaimsKeysBySourceAndConsumer(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			b, err := inbox.NewBatch(inbox.Config{DB: db, Consumer: "billing.invoice"})
			require.NoError(t, err)
			claims := []inbox.Claim{
				{Consumer: "billing.invoice", Key: inbox.Key{Source: "a", MessageID: "m-1"}},
				{Consumer: "billing.invoice", Key: inbox.Key{Source: "b", MessageID: "m-1"}},
				{Consumer: "billing.invoice", Key: inbox.Key{Source: "a", MessageID: "m-1"}}, // a copy
				{Consumer: "billing.audit", Key: inbox.Key{Source: "a", MessageID: "m-1"}},
			}
			claim := func(claims []inbox.Claim) []bool {
				t.Helper()
				msg := message.NewMessage("batch", nil)
				msg.SetContext(context.Background())
				var fresh []bool
				_, err := unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
					var err error
					fresh, err = b.ClaimAll(msg.Context(), claims)
					return nil, err
				})
				require.NoError(t, err)
				return fresh
			}
			require.Equal(t, []bool{true, true, false, true}, claim(claims))
			var rows int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&rows).Error)
			require.EqualValues(t, 3, rows)

			claims = append(claims, inbox.Claim{Consumer: "billing.invoice", Key: inbox.Key{Source: "c", MessageID: "m-1"}})
			require.Equal(t, []bool{false, false, false, false, true}, claim(claims), "in the table: only the new source's key")
		})
	}
}

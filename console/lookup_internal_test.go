package console

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/inbox"
)

// TestLookupInbox runs the lookup's SQL on every store.
func TestLookupInbox(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			d, err := dialects.Of(db)
			require.NoError(t, err)
			at := time.Now().Add(-time.Minute).Truncate(time.Second)
			for _, consumer := range []string{"billing/Charge", "shipping/Ship"} {
				require.NoError(t, db.Exec(d.InboxInsert(inbox.TableDefault), consumer, "shop", "order-7", "test.Order", d.Time(at)).Error)
			}
			require.NoError(t, db.Exec(d.InboxInsert(inbox.TableDefault), "billing/Charge", "shop", "order-8", "test.Order", d.Time(at)).Error)
			require.NoError(t, db.Exec(d.InboxCountDuplicate(inbox.TableDefault), "billing/Charge", "shop", "order-7").Error)
			c, err := New(Config{DB: db})
			require.NoError(t, err)

			keys, err := c.lookupInbox(context.Background(), "order-7", "", 10)
			require.NoError(t, err)
			require.Len(t, keys, 2)
			require.Equal(t, inboxKey{Consumer: "billing/Charge", Source: "shop", MessageID: "order-7", MessageType: "test.Order",
				ReceivedAt: keys[0].ReceivedAt, Status: "done", Duplicates: 1}, keys[0])
			require.WithinDuration(t, at, keys[0].ReceivedAt, time.Second)
			require.Equal(t, "shipping/Ship", keys[1].Consumer)

			keys, err = c.lookupInbox(context.Background(), "order-7", "shipping/Ship", 10)
			require.NoError(t, err)
			require.Len(t, keys, 1)
			keys, err = c.lookupInbox(context.Background(), "order-9", "", 10)
			require.NoError(t, err)
			require.Empty(t, keys)
		})
	}
}

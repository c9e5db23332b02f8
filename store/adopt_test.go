package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

// TestInstancesStartingTogetherAdoptTheKeysOnce on every store: three
// instances of a rollout copy the keys from before migration 5 at once;
// each start succeeds and every key is copied once. On MariaDB two of
// three exited at start with a deadlock (a cold trial, 300,000 keys).
func TestInstancesStartingTogetherAdoptTheKeysOnce(t *testing.T) {
	for _, s := range testenv.Databases {
		t.Run(s.Name, func(t *testing.T) {
			db := s.Open(t)
			const keys = 20000
			now := time.Now().UTC()
			for from := 0; from < keys; from += 1000 {
				var values []string
				var args []any
				for i := from; i < from+1000; i++ {
					values = append(values, "(?, ?, ?, ?, ?)")
					args = append(args, "billing.Invoice", "", fmt.Sprintf("m-%d", i), "billing.Invoice", now)
				}
				q := "INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at) VALUES " + strings.Join(values, ", ")
				require.NoError(t, db.Exec(q, args...).Error)
			}
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Go(func() {
					errs[i] = store.AdoptLegacyKeys(context.Background(), db, store.Tables{}, "billing/billing.Invoice", "billing.Invoice", true)
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			var n int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox WHERE consumer = ?", "billing/billing.Invoice").Scan(&n).Error)
			require.EqualValues(t, keys, n)
		})
	}
}

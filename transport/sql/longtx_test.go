package sql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

// watchLongTransactions logs, while t runs, every transaction on the
// PostgreSQL server that has held a transaction ID for longer than 10 s:
// the transport reads on PostgreSQL only rows of transactions older than
// every one still open on the server (transport/sql's package doc), so
// such a transaction, anywhere on the server (another package's test
// running beside this one), holds back every message published after it
// began. Watermill's universal tests give a message 15 s; when one of
// them times out, the log says whether this was why. Each transaction is
// logged once. (How long is measured from the transaction's start, not
// from when it took its ID.)
func watchLongTransactions(t *testing.T) {
	if testing.Short() {
		return // no PostgreSQL: its tests skip
	}
	db, err := store.Open(testenv.PostgresDSN())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = store.Close(db)
	})
	wg.Go(func() {
		seen := map[string]bool{}
		saidErr := false
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var rows []struct {
				Pid   int
				Since time.Time
				Held  float64
				Query string
			}
			err := db.WithContext(ctx).Raw(`SELECT pid, xact_start AS since, extract(epoch FROM now() - xact_start) AS held, left(query, 200) AS query
				FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND now() - xact_start > interval '10 seconds'`).Scan(&rows).Error
			if err != nil {
				if ctx.Err() == nil && !saidErr {
					saidErr = true
					t.Logf("the watch of long transactions cannot read pg_stat_activity: %v", err)
				}
				continue
			}
			for _, r := range rows {
				key := fmt.Sprint(r.Pid, r.Since)
				if !seen[key] {
					seen[key] = true
					t.Logf("a transaction on the server has held a transaction ID for %.0f s (pid %d, since %s, its last statement %q): SQL-transport reads on PostgreSQL wait for it",
						r.Held, r.Pid, r.Since.Format(time.TimeOnly), r.Query)
				}
			}
		}
	})
}

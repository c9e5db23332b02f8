package storeinfo_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/testenv"
)

type Reminder struct{}

func (Reminder) MessageName() string { return "store.Reminder" }

// TestDelayedListAndSummary: the waiting messages, earliest due first, and
// their count and earliest due time, on every store.
func TestDelayedListAndSummary(t *testing.T) {
	for _, tc := range testenv.Databases {
		t.Run(tc.Name, func(t *testing.T) {
			db := tc.Open(t)
			ctx := context.Background()
			n, next, err := storeinfo.DelayedSummary(ctx, db)
			require.NoError(t, err)
			require.Zero(t, n)
			require.True(t, next.IsZero())
			b, err := bus.New(bus.Config{Endpoint: "reminders", DB: db, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			due := time.Now().Add(time.Hour).UTC()
			prefix := testenv.Name("r-")
			require.NoError(t, bus.Publish(ctx, b, &Reminder{}, bus.WithMessageID(prefix+"-later"), bus.DeliverAt(due.Add(time.Minute))))
			require.NoError(t, bus.Publish(ctx, b, &Reminder{}, bus.WithMessageID(prefix+"-sooner"), bus.DeliverAt(due)))
			rows, err := storeinfo.ListDelayed(ctx, db, 10)
			require.NoError(t, err)
			var ours []storeinfo.Delayed
			for _, r := range rows {
				if len(r.MessageID) > len(prefix) && r.MessageID[:len(prefix)] == prefix {
					ours = append(ours, r)
				}
			}
			require.Len(t, ours, 2)
			require.Equal(t, prefix+"-sooner", ours[0].MessageID)
			require.WithinDuration(t, due, ours[0].DueAt, time.Millisecond)
			n, next, err = storeinfo.DelayedSummary(ctx, db)
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, int64(2))
			require.False(t, next.After(due.Add(time.Millisecond)))
		})
	}
}

package storeinfo_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/testenv"
)

// TestClockSkewSeesAClockAhead: the database's clock, read back, against a
// process clock in step and one an hour ahead.
func TestClockSkewSeesAClockAhead(t *testing.T) {
	for _, db := range testenv.Databases {
		t.Run(db.Name, func(t *testing.T) {
			gdb := db.Open(t)
			ctx := context.Background()
			skew, err := storeinfo.ClockSkew(ctx, gdb, time.Now)
			require.NoError(t, err)
			require.Less(t, skew.Abs(), 5*time.Second, "the database runs on this machine")
			if db.Name == "sqlite" {
				return // in this process: no other clock
			}
			ahead := func() time.Time { return time.Now().Add(time.Hour) }
			skew, err = storeinfo.ClockSkew(ctx, gdb, ahead)
			require.NoError(t, err)
			require.InDelta(t, time.Hour.Seconds(), skew.Seconds(), 5)
		})
	}
}

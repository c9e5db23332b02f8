package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"gorm.io/gorm"
)

// growthPoint is the inbox handler latency at one table size.
type growthPoint struct {
	rows     int64
	p50, p99 time.Duration
}

// runGrowth measures inbox handler latency with the inbox already holding
// each of sizes rows.
func runGrowth(ctx context.Context, db *gorm.DB, sizes []int64, n int64, out io.Writer) ([]growthPoint, error) {
	if err := db.Exec(truncateAll).Error; err != nil {
		return nil, err
	}
	var have int64
	var points []growthPoint
	for _, size := range sizes {
		if size > have {
			if err := db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
				SELECT 'earlier', '', 'm' || g, 'bench.Work', now() FROM generate_series(?::bigint, ?::bigint) g`, have+1, size).Error; err != nil {
				return nil, err
			}
			have = size
		}
		if err := db.Exec("VACUUM ANALYZE postroom_inbox").Error; err != nil {
			return nil, err
		}
		lat, err := inboxLatencies(ctx, db, n)
		if err != nil {
			return nil, err
		}
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		points = append(points, growthPoint{size, p50, p99})
		fmt.Fprintf(out, "growth: inbox handler with %d rows already in the inbox: p50 %s, p99 %s\n", size, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	}
	return points, nil
}

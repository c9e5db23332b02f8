package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
)

// busKinds are the end-to-end variants.
var busKinds = []Kind{Plain, Inbox, InboxStale, Naive, Deduplicator}

// runRabbitMQ measures every variant end to end on RabbitMQ at concurrency 8.
func runRabbitMQ(ctx context.Context, db *gorm.DB, url string, n int64, out io.Writer) (map[Kind]float64, error) {
	rate := map[Kind]float64{}
	for _, kind := range busKinds {
		if err := db.Exec(truncateAll).Error; err != nil {
			return nil, err
		}
		tr, err := amqp.New(amqp.Config{URL: url})
		if err != nil {
			return nil, err
		}
		d, err := runE2EOn(ctx, tr, db, kind, 8, n)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq %s: %w", kind, err)
		}
		rate[kind] = float64(n) / d.Seconds()
	}
	printRates(out, "rabbitmq + postgres", rate)
	return rate, nil
}

func printRates(out io.Writer, where string, rate map[Kind]float64) {
	fmt.Fprintf(out, "%s at concurrency 8:", where)
	for _, kind := range busKinds {
		fmt.Fprintf(out, " %s %.0f", kind, rate[kind])
	}
	fmt.Fprintf(out, " msg/s (inbox/plain %.2f)\n", rate[Inbox]/rate[Plain])
}

// runSQLite measures every variant end to end on the embedded default (a
// SQLite file, in-memory transport) at concurrency 8.
func runSQLite(ctx context.Context, n int64, out io.Writer) (map[Kind]float64, error) {
	dir, err := os.MkdirTemp("", "postroom-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return nil, err
	}
	if err := db.Exec("CREATE TABLE business (id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, amount INTEGER NOT NULL)").Error; err != nil {
		return nil, err
	}
	if err := db.Exec(createProcessed).Error; err != nil {
		return nil, err
	}
	rate := map[Kind]float64{}
	for _, kind := range busKinds {
		for _, table := range []string{"business", "processed", "postroom_inbox", "postroom_stale_watermarks"} {
			if err := db.Exec("DELETE FROM " + table).Error; err != nil {
				return nil, err
			}
		}
		d, err := runE2E(ctx, db, kind, 8, n)
		if err != nil {
			return nil, fmt.Errorf("sqlite %s: %w", kind, err)
		}
		rate[kind] = float64(n) / d.Seconds()
	}
	printRates(out, "sqlite (embedded default)", rate)
	return rate, nil
}

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

// runRedelivery delivers every message twice (the same ID, back to back)
// at concurrency 8, through the naive handler and through the inbox, and
// reports how many were applied twice: the reason the naive way is wrong.
func runRedelivery(ctx context.Context, db *gorm.DB, n int64, out io.Writer) error {
	doubled := map[Kind]int64{}
	for _, kind := range []Kind{Naive, Inbox} {
		if err := db.Exec(truncateAll).Error; err != nil {
			return err
		}
		if _, err := runE2EWith(ctx, gochannel.New(gochannel.Config{OutputBuffer: 1024}), db, kind, 8, n, 2); err != nil {
			return fmt.Errorf("redelivery %s: %w", kind, err)
		}
		var rows, distinct int64
		if err := db.Raw("SELECT COUNT(*), COUNT(DISTINCT message_id) FROM business").Row().Scan(&rows, &distinct); err != nil {
			return err
		}
		doubled[kind] = rows - distinct
	}
	fmt.Fprintf(out, "redelivery: %d messages each delivered twice at concurrency 8: naive way applied %d twice, inbox %d\n",
		n, doubled[Naive], doubled[Inbox])
	return nil
}

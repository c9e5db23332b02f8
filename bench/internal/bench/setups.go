package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/amqp"
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

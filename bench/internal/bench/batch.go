package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/transport/gochannel"
)

// batchSpec is a handler's batched commits: up to size deliveries in one
// transaction, the first of them waiting at most maxWait for the rest.
type batchSpec struct {
	size    int
	maxWait time.Duration
}

// batchDefault is the batching of kind InboxBatch, chosen before any
// measurement: a hundred messages per transaction (the figure of issue 20's
// pgbench run), and a wait short next to a commit on disk.
var batchDefault = batchSpec{size: 100, maxWait: 10 * time.Millisecond}

// batchSizes are the sizes of the throughput-against-batch-size table.
var batchSizes = []int{1, 10, 50, 100}

// option is the handler option of batched commits per spec.
func (spec batchSpec) option() bus.HandlerOption { return bus.WithBatch(spec.size, spec.maxWait) }

// BatchResult is the batched-commit measurement.
type BatchResult struct {
	// PerSecond is the throughput per batch size (batchSizes), in-memory
	// transport and PostgreSQL at concurrency 8.
	PerSecond map[int]float64
	// P50, P99 are the latency of one message at a time (from the router's
	// hand-off to the ack decision) through a handler batched per
	// batchDefault.
	P50, P99 time.Duration
	// Commit and Tx are the p50 of a raw pgx COMMIT of one inbox message,
	// and of its whole transaction (BEGIN, two INSERTs, COMMIT), one at a
	// time.
	Commit, Tx time.Duration
}

// runBatch measures throughput against batch size, in interleaved rounds
// (the median counts), and the latency of a batched handler at low load.
func runBatch(ctx context.Context, db *gorm.DB, pool *pgxpool.Pool, n int64, rounds int, ceiling float64, out io.Writer) (BatchResult, error) {
	r := BatchResult{PerSecond: map[int]float64{}}
	times := map[int][]time.Duration{}
	for range max(rounds, 1) {
		for _, size := range batchSizes {
			if err := db.Exec(truncateAll).Error; err != nil {
				return r, err
			}
			d, err := runE2EWith(ctx, gochannel.New(gochannel.Config{}), db, InboxBatch, 8, n,
				e2eOptions{batch: batchSpec{size: size, maxWait: batchDefault.maxWait}})
			if err != nil {
				return r, fmt.Errorf("batch size %d: %w", size, err)
			}
			times[size] = append(times[size], d)
		}
	}
	fmt.Fprintf(out, "batch: inbox handler, in-memory transport, PostgreSQL, concurrency 8, max wait %s:", batchDefault.maxWait)
	for _, size := range batchSizes {
		ds := times[size]
		slices.Sort(ds)
		r.PerSecond[size] = float64(n) / ds[len(ds)/2].Seconds()
		fmt.Fprintf(out, " size %d %.0f msg/s (%.2f of the ceiling);", size, r.PerSecond[size], r.PerSecond[size]/ceiling)
	}
	fmt.Fprintln(out)

	if err := db.Exec(truncateAll).Error; err != nil {
		return r, err
	}
	var err error
	if r.Commit, r.Tx, err = commitTime(ctx, pool, 200); err != nil {
		return r, err
	}
	lb, err := startLatencyBus(ctx, db, batchDefault.option())
	if err != nil {
		return r, err
	}
	defer lb.close()
	var lat []time.Duration
	for range max(n/16, 100) {
		l, err := lb.measure(ctx, 1)
		if err != nil {
			return r, err
		}
		lat = append(lat, l...)
	}
	slices.Sort(lat)
	r.P50, r.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	fmt.Fprintf(out, "batch latency: one message at a time, %d messages, batch size %d: p50 %s, p99 %s; max wait %s, commit p50 %s (whole one-message inbox transaction p50 %s, raw pgx); p99 ≤ max wait + 2 commits: %t\n",
		len(lat), batchDefault.size, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), batchDefault.maxWait,
		r.Commit.Round(time.Microsecond), r.Tx.Round(time.Microsecond), r.P99 <= batchDefault.maxWait+2*r.Commit)
	return r, nil
}

// commitTime runs n one-message inbox transactions through pgx one at a
// time and returns the p50 of their COMMIT and of the whole transaction.
func commitTime(ctx context.Context, pool *pgxpool.Pool, n int) (commit, whole time.Duration, err error) {
	commits, txs := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, 0, err
		}
		id := fmt.Sprintf("commit-time-%d-%d", start.UnixNano(), i)
		if _, err := tx.Exec(ctx, insertInbox, "bench", "", id, "bench.Work", time.Now().UTC()); err != nil {
			_ = tx.Rollback(ctx)
			return 0, 0, err
		}
		if _, err := tx.Exec(ctx, insertBusiness, id, i); err != nil {
			_ = tx.Rollback(ctx)
			return 0, 0, err
		}
		before := time.Now()
		if err := tx.Commit(ctx); err != nil {
			return 0, 0, err
		}
		commits, txs = append(commits, time.Since(before)), append(txs, time.Since(start))
	}
	slices.Sort(commits)
	slices.Sort(txs)
	return commits[n/2], txs[n/2], nil
}

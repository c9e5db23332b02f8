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
// measurement: a hundred messages per transaction (the figure of a pgbench
// run), and a wait short next to a commit on disk.
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
	// HandlerPerSecond is the same for a batch handler (bus.HandleBatch):
	// the keys of a batch in one statement, its business rows in another.
	HandlerPerSecond map[int]float64
	// P50, P99 are the latency of one message at a time (from the router's
	// hand-off to the ack decision) through a handler batched per
	// batchDefault.
	P50, P99 time.Duration
	// Raw is the same message by hand, raw pgx (rawBatchOfOne).
	Raw rawBatchOfOne
}

// runBatch measures throughput against batch size, in interleaved rounds
// (the median counts), and the latency of a batched handler at low load.
func runBatch(ctx context.Context, db *gorm.DB, pool *pgxpool.Pool, n int64, rounds int, ceiling float64, out io.Writer) (BatchResult, error) {
	r := BatchResult{PerSecond: map[int]float64{}, HandlerPerSecond: map[int]float64{}}
	type key struct {
		kind Kind
		size int
	}
	times := map[key][]time.Duration{}
	for range max(rounds, 1) {
		for _, kind := range []Kind{InboxBatch, BatchHandler} {
			for _, size := range batchSizes {
				d, err := warmedUp(db, n, func(n int64, _ bool) (time.Duration, error) {
					return runE2EWith(ctx, gochannel.New(gochannel.Config{}), db, kind, 8, n,
						e2eOptions{batch: batchSpec{size: size, maxWait: batchDefault.maxWait}})
				})
				if err != nil {
					return r, fmt.Errorf("%s size %d: %w", kind, size, err)
				}
				times[key{kind, size}] = append(times[key{kind, size}], d)
			}
		}
	}
	for _, kind := range []Kind{InboxBatch, BatchHandler} {
		rates, what := r.PerSecond, "inbox handler (WithBatch)"
		if kind == BatchHandler {
			rates, what = r.HandlerPerSecond, "batch handler (HandleBatch)"
		}
		fmt.Fprintf(out, "batch: %s, in-memory transport, PostgreSQL, concurrency 8, max wait %s:", what, batchDefault.maxWait)
		for _, size := range batchSizes {
			ds := times[key{kind, size}]
			slices.Sort(ds)
			rates[size] = float64(n) / ds[len(ds)/2].Seconds()
			fmt.Fprintf(out, " size %d %.0f msg/s (%.2f of the ceiling);", size, rates[size], rates[size]/ceiling)
		}
		fmt.Fprintln(out)
	}

	if err := db.Exec(truncateAll).Error; err != nil {
		return r, err
	}
	var err error
	if r.Raw, err = runRawBatchOfOne(ctx, pool, batchDefault.maxWait, max(n/16, 100)); err != nil {
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
	fmt.Fprintf(out, "batch latency: one message at a time, %d messages, batch size %d, max wait %s: p50 %s, p99 %s; "+
		"raw pgx doing the same (BEGIN, inbox and business INSERTs, COMMIT once the max wait from the start has passed): p50 %s, p99 %s; "+
		"COMMIT p50 %s after the wait (%s back to back); p99 <= max wait + 2 commits: %t\n",
		len(lat), batchDefault.size, batchDefault.maxWait, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
		r.Raw.P50.Round(time.Microsecond), r.Raw.P99.Round(time.Microsecond),
		r.Raw.Commit.Round(time.Microsecond), r.Raw.HotCommit.Round(time.Microsecond), r.P99 <= batchDefault.maxWait+2*r.Raw.Commit)
	return r, nil
}

// rawBatchOfOne is what a batch of one message costs by hand.
type rawBatchOfOne struct {
	// P50, P99: from the start to the COMMIT's return.
	P50, P99 time.Duration
	// Commit is the p50 of the COMMIT after the wait; HotCommit of a
	// COMMIT right after the INSERTs (one transaction after another, the
	// connection never idle).
	Commit, HotCommit time.Duration
}

// runRawBatchOfOne runs n one-message inbox transactions through pgx, one
// at a time, as a batch of one message runs them: a timer of maxWait
// starts, then BEGIN, the inbox and business INSERTs, and COMMIT once the
// timer has fired; a millisecond's rest between messages, as the latency
// run's sender polls. Then n transactions back to back, for the COMMIT of
// a busy connection.
func runRawBatchOfOne(ctx context.Context, pool *pgxpool.Pool, maxWait time.Duration, n int64) (rawBatchOfOne, error) {
	var r rawBatchOfOne
	one := func(i int64, wait time.Duration) (total, commit time.Duration, err error) {
		start := time.Now()
		timer := time.NewTimer(wait)
		defer timer.Stop()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, 0, err
		}
		defer tx.Rollback(ctx)
		id := fmt.Sprintf("batch-of-one-%d-%d", start.UnixNano(), i)
		if _, err := tx.Exec(ctx, insertInbox, "bench", "", id, "bench.Work", time.Now().UTC()); err != nil {
			return 0, 0, err
		}
		if _, err := tx.Exec(ctx, insertBusiness, id, i); err != nil {
			return 0, 0, err
		}
		if wait > 0 {
			<-timer.C
		}
		before := time.Now()
		if err := tx.Commit(ctx); err != nil {
			return 0, 0, err
		}
		return time.Since(start), time.Since(before), nil
	}
	var totals, commits, hot []time.Duration
	for i := range n {
		total, commit, err := one(i, maxWait)
		if err != nil {
			return r, err
		}
		totals, commits = append(totals, total), append(commits, commit)
		time.Sleep(time.Millisecond)
	}
	for i := range n {
		_, commit, err := one(n+i, 0)
		if err != nil {
			return r, err
		}
		hot = append(hot, commit)
	}
	for _, ds := range [][]time.Duration{totals, commits, hot} {
		slices.Sort(ds)
	}
	r.P50, r.P99 = totals[len(totals)/2], totals[len(totals)*99/100]
	r.Commit, r.HotCommit = commits[len(commits)/2], hot[len(hot)/2]
	return r, nil
}

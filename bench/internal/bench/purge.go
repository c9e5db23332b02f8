package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// PurgeResult is the cleanup measurement.
type PurgeResult struct {
	Rows               int64
	RowsPerSecond      float64
	BaseP99, DuringP99 time.Duration
	DuringMessages     int // inbox messages handled in runs started while the purge ran
}

// runPurge fills the inbox with rows expired rows, measures the p99 of
// inbox handlers without a purge, then again while CleanupStore purges, on
// one running bus, as in a service: base and during differ by the purge
// alone.
func runPurge(ctx context.Context, db *gorm.DB, rows, messages int64, out io.Writer) (PurgeResult, error) {
	if err := db.Exec(truncateAll).Error; err != nil {
		return PurgeResult{}, err
	}
	if err := db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		SELECT 'old', '', 'm' || g, 'bench.Work', now() - interval '20 days' FROM generate_series(1, ?) g`, rows).Error; err != nil {
		return PurgeResult{}, err
	}
	if err := db.Exec("ANALYZE postroom_inbox").Error; err != nil {
		return PurgeResult{}, err
	}
	lb, err := startLatencyBus(ctx, db)
	if err != nil {
		return PurgeResult{}, err
	}
	defer lb.close()
	// Base and during are sent in the same chunks, so that both see the
	// same share of a chunk's start.
	chunk := max(messages/8, 100)
	var base []time.Duration
	for range 8 {
		lat, err := lb.measure(ctx, chunk)
		if err != nil {
			return PurgeResult{}, err
		}
		base = append(base, lat...)
	}
	cleanup, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return PurgeResult{}, err
	}
	var (
		purged   handlers.CleanupResult
		purgeErr error
		took     time.Duration
	)
	purging, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		close(purging)
		purged, purgeErr = cleanup.Purge(ctx, handlers.CleanupStore{Retention: 10 * 24 * time.Hour, BatchSize: handlers.BatchSizeDefault})
		took = time.Since(start)
	}()
	<-purging
	time.Sleep(100 * time.Millisecond)
	// Handler load in chunks for as long as the purge lasts: every chunk is
	// sent while the purge is still deleting.
	var during []time.Duration
	for running := true; running; {
		lat, err := lb.measure(ctx, chunk)
		if err != nil {
			return PurgeResult{}, err
		}
		during = append(during, lat...)
		select {
		case <-finished:
			running = false
		default:
		}
	}
	<-finished
	if purgeErr != nil {
		return PurgeResult{}, purgeErr
	}
	r := PurgeResult{
		Rows: purged.Inbox, RowsPerSecond: float64(purged.Inbox) / took.Seconds(),
		BaseP99: p99(base), DuringP99: p99(during), DuringMessages: len(during),
	}
	fmt.Fprintf(out, "purge: %d expired rows in %s (%.0f rows/s, batches of %d, resting as long as each took); inbox handler p99 %s without, %s during (%d messages handled while it ran)\n",
		r.Rows, took.Round(time.Millisecond), r.RowsPerSecond, handlers.BatchSizeDefault, r.BaseP99.Round(time.Microsecond), r.DuringP99.Round(time.Microsecond), r.DuringMessages)
	return r, nil
}

// inboxLatencies runs n messages through an inbox handler at concurrency 8
// on a bus of their own and returns the time each delivery took.
func inboxLatencies(ctx context.Context, db *gorm.DB, n int64) ([]time.Duration, error) {
	lb, err := startLatencyBus(ctx, db)
	if err != nil {
		return nil, err
	}
	defer lb.close()
	return lb.measure(ctx, n)
}

// latencyBus is a running bus with an inbox handler at concurrency 8 that
// records the time each delivery took, from the router's hand-off to the
// ack decision.
type latencyBus struct {
	b    *bus.Bus
	stop context.CancelFunc
	mu   sync.Mutex
	lat  []time.Duration
	sent int64
}

// startLatencyBus starts a latencyBus; extra adds handler options to
// WithInbox (batched commits).
func startLatencyBus(ctx context.Context, db *gorm.DB, extra ...bus.HandlerOption) (*latencyBus, error) {
	lb := &latencyBus{}
	timing := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			lb.mu.Lock()
			lb.lat = append(lb.lat, time.Since(start))
			lb.mu.Unlock()
			return out, err
		}
	}
	// The table gauges are off: their queries run once a minute in a
	// service, and here would land at a random point of a measurement of
	// a few seconds (at the bus's start, over an inbox full of just-deleted
	// rows, they stalled every handler for ~10 ms on 2026-12-03).
	b, err := bus.New(bus.Config{
		Endpoint: "bench", DB: db,
		Concurrency: 8, Logger: slog.New(slog.DiscardHandler), Cleanup: bus.CleanupSchedule{Disabled: true}, Middleware: []message.HandlerMiddleware{timing},
		Metrics: bus.Metrics{TableGaugeInterval: -1},
	})
	if err != nil {
		return nil, err
	}
	err = bus.Handle(b, func(ctx context.Context, w *Work) error {
		return unitofwork.Tx(ctx).Exec(insertBusinessGorm, bus.MessageID(ctx), w.I).Error
	}, append([]bus.HandlerOption{bus.WithInbox()}, extra...)...)
	if err != nil {
		b.Close()
		return nil, err
	}
	lb.b = b
	lb.stop, err = runAndSend(ctx, b, 0)
	if err != nil {
		lb.close()
		return nil, err
	}
	return lb, nil
}

// measure sends n messages, waits until they are handled and returns the
// time each took.
func (lb *latencyBus) measure(ctx context.Context, n int64) ([]time.Duration, error) {
	lb.mu.Lock()
	from := len(lb.lat)
	lb.mu.Unlock()
	for i := range n {
		if err := bus.Send(ctx, lb.b, &Work{I: lb.sent + i}); err != nil {
			return nil, err
		}
	}
	lb.sent += n
	// Handled is counted inside the timing middleware: wait for both.
	for {
		if lb.b.Counters().Total(metrics.Failed) > 0 {
			return nil, errors.New("a benchmark message failed")
		}
		lb.mu.Lock()
		if lb.b.Counters().Total(metrics.Handled) >= uint64(lb.sent) && int64(len(lb.lat)-from) >= n {
			defer lb.mu.Unlock()
			return slices.Clone(lb.lat[from:]), nil
		}
		lb.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

func (lb *latencyBus) close() {
	if lb.stop != nil {
		lb.stop()
	}
	lb.b.Close()
}

func p99(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

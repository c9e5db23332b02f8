package bench

import (
	"context"
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
	"github.com/postroom/postroom/transport/gochannel"
)

// PurgeResult is the cleanup measurement.
type PurgeResult struct {
	Rows               int64
	RowsPerSecond      float64
	BaseP99, DuringP99 time.Duration
	DuringMessages     int // inbox messages handled in runs started while the purge ran
}

// runPurge fills the inbox with rows expired rows, measures the p99 of
// inbox handlers without a purge, then again while CleanupStore purges.
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
	base, err := inboxLatencies(ctx, db, messages)
	if err != nil {
		return PurgeResult{}, err
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
	// Handler load in small runs for as long as the purge lasts: every run
	// starts while the purge is still deleting.
	var during []time.Duration
	for running := true; running; {
		lat, err := inboxLatencies(ctx, db, max(messages/8, 100))
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
	fmt.Fprintf(out, "purge: %d expired rows in %s (%.0f rows/s, batches of %d, resting as long as each batch took); inbox handler p99 %s without, %s during (%d messages handled while it ran)\n",
		r.Rows, took.Round(time.Millisecond), r.RowsPerSecond, handlers.BatchSizeDefault, r.BaseP99.Round(time.Microsecond), r.DuringP99.Round(time.Microsecond), r.DuringMessages)
	return r, nil
}

// inboxLatencies runs n messages through an inbox handler at concurrency 8
// and returns the time each delivery took, from the router's hand-off to the
// ack decision.
func inboxLatencies(ctx context.Context, db *gorm.DB, n int64) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	timing := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
			return out, err
		}
	}
	// A bus per run: its table gauges are off, because their start-up
	// queries (once a minute in a running service) would land in every run
	// and, on an inbox full of just-deleted rows, stall the handlers of
	// that run (p99 ~10 ms on 2026-12-03, whatever the purge's pace).
	b, err := bus.New(bus.Config{
		Endpoint: "bench", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Concurrency: 8, Logger: slog.New(slog.DiscardHandler), Cleanup: bus.CleanupConfig{Disabled: true},
		TableGaugeInterval: -1, Middleware: []message.HandlerMiddleware{timing},
	})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	err = bus.Handle(b, func(ctx context.Context, w *Work) error {
		return bus.Tx(ctx).Exec(insertBusinessGorm, bus.MessageID(ctx), w.I).Error
	}, bus.WithInbox())
	if err != nil {
		return nil, err
	}
	stop, err := runAndSend(ctx, b, n)
	defer stop()
	if err != nil {
		return nil, err
	}
	for b.Counters().Total(metrics.Handled) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	return lat, nil
}

func p99(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

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
	PurgeOutlasted     bool // the purge was still running when the handlers finished
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
		wg       sync.WaitGroup
		purged   handlers.CleanupResult
		purgeErr error
		took     time.Duration
	)
	purging := make(chan struct{})
	wg.Go(func() {
		start := time.Now()
		close(purging)
		purged, purgeErr = cleanup.Purge(ctx, handlers.CleanupStore{Retention: 10 * 24 * time.Hour, BatchSize: handlers.BatchSizeDefault})
		took = time.Since(start)
	})
	<-purging
	time.Sleep(100 * time.Millisecond)
	during, err := inboxLatencies(ctx, db, messages)
	if err != nil {
		return PurgeResult{}, err
	}
	outlasted := took == 0
	wg.Wait()
	if purgeErr != nil {
		return PurgeResult{}, purgeErr
	}
	r := PurgeResult{
		Rows: purged.Inbox, RowsPerSecond: float64(purged.Inbox) / took.Seconds(),
		BaseP99: p99(base), DuringP99: p99(during), PurgeOutlasted: outlasted,
	}
	fmt.Fprintf(out, "purge: %d expired rows in %s (%.0f rows/s, batches of %d); inbox handler p99 %s without, %s during (purge still running at the end: %v)\n",
		r.Rows, took.Round(time.Millisecond), r.RowsPerSecond, handlers.BatchSizeDefault, r.BaseP99.Round(time.Microsecond), r.DuringP99.Round(time.Microsecond), r.PurgeOutlasted)
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
	b, err := bus.New(bus.Config{
		Endpoint: "bench", Transport: gochannel.New(gochannel.Config{OutputBuffer: 1024}), DB: db,
		Concurrency: 8, Logger: slog.New(slog.DiscardHandler), Cleanup: bus.CleanupConfig{Disabled: true},
		Middleware: []message.HandlerMiddleware{timing},
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
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()
	for i := range n {
		if err := bus.Send(ctx, b, &Work{I: i}); err != nil {
			return nil, err
		}
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

package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
)

// Work is the benchmark's message.
type Work struct{ I int64 }

// MessageName is the stable name of Work.
func (Work) MessageName() string { return "bench.Work" }

// runE2E sends n messages through a bus on gochannel and db, handled by a
// handler of kind at the given concurrency, and returns the time from the
// moment handling starts until every message has been handled. The messages
// are all sent first, behind a gate, so the time is the framework's
// handling, as the raw runs time only the database work (producing the
// messages is the senders' cost, elsewhere in production).
func runE2E(ctx context.Context, db *gorm.DB, kind Kind, concurrency int, n int64) (time.Duration, error) {
	return runE2EOn(ctx, gochannel.New(gochannel.Config{}), db, kind, concurrency, n)
}

// runE2EOn is runE2E on a given transport, which it closes.
func runE2EOn(ctx context.Context, tr transport.Transport, db *gorm.DB, kind Kind, concurrency int, n int64) (time.Duration, error) {
	return runE2EWith(ctx, tr, db, kind, concurrency, n, e2eOptions{})
}

// e2eOptions are the rarer settings of an end-to-end run.
type e2eOptions struct {
	// copies sends each message this many times with the same ID, back to
	// back, as a broker redelivering them would (0 or 1: once).
	copies int
	// meter, if not nil, measures the CPU of the timed window alone.
	meter *cpuMeter
	// batch is the batched commits of kind InboxBatch (zero: batchDefault).
	batch batchSpec
}

// batchHandler is the handler of kind BatchHandler: the business rows of
// a batch in one INSERT.
func batchHandler(ctx context.Context, ws []*Work) error {
	ids := bus.MessageIDs(ctx)
	var q strings.Builder
	q.WriteString("INSERT INTO business (message_id, amount) VALUES ")
	args := make([]any, 0, 2*len(ws))
	for i, w := range ws {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?)")
		args = append(args, ids[i], w.I)
	}
	return unitofwork.Tx(ctx).Exec(q.String(), args...).Error
}

// runE2EWith is runE2EOn with o. It closes tr.
func runE2EWith(ctx context.Context, tr transport.Transport, db *gorm.DB, kind Kind, concurrency int, n int64, o e2eOptions) (time.Duration, error) {
	copies, meter := max(o.copies, 1), o.meter
	cfg := bus.Config{
		Endpoint:    "bench",
		Transport:   tr,
		DB:          db,
		Concurrency: concurrency,
		Logger:      slog.New(slog.DiscardHandler),
		Cleanup:     bus.CleanupSchedule{Disabled: true},
	}
	// The gate holds every delivery until all are sent; the count closes
	// done when the last has settled, so the clock stops without a poller
	// waking every millisecond on the cores being measured (the raw runs
	// have none either).
	gate, done := make(chan struct{}), make(chan struct{})
	var delivered atomic.Int64
	total := n * int64(copies)
	cfg.Middleware = append(cfg.Middleware, func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			<-gate
			out, err := h(msg)
			if delivered.Add(1) == total {
				close(done)
			}
			return out, err
		}
	})
	var opts []bus.HandlerOption
	handler := func(ctx context.Context, w *Work) error {
		return unitofwork.Tx(ctx).Exec(insertBusinessGorm, bus.MessageID(ctx), w.I).Error
	}
	switch kind {
	case Plain:
		opts = append(opts, bus.WithTransaction())
	case Inbox:
		opts = append(opts, bus.WithInbox())
	case InboxStale:
		opts = append(opts, bus.WithInbox(), bus.WithStale())
	case InboxBatch:
		opts = append(opts, bus.WithInbox(), cmp.Or(o.batch, batchDefault).option())
	case Naive:
		handler = func(ctx context.Context, w *Work) error {
			id := bus.MessageID(ctx)
			var seen int64
			if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM processed WHERE message_id = ?", id).Scan(&seen).Error; err != nil || seen > 0 {
				return err
			}
			if err := db.WithContext(ctx).Exec(insertBusinessGorm, id, w.I).Error; err != nil {
				return err
			}
			return db.WithContext(ctx).Exec("INSERT INTO processed (message_id) VALUES (?)", id).Error
		}
	case Deduplicator:
		repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
		if err != nil {
			return 0, err
		}
		dedup := &middleware.Deduplicator{
			KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
			Repository: repo,
		}
		cfg.Middleware = append(cfg.Middleware, dedup.Middleware)
		opts = append(opts, bus.WithTransaction())
	}
	defer tr.Close() // after the bus (a bus leaves the transport it is given open)
	b, err := bus.New(cfg)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	if kind == BatchHandler {
		err = bus.HandleBatch(b, batchHandler, bus.WithInbox(), cmp.Or(o.batch, batchDefault).option())
	} else {
		err = bus.Handle(b, handler, opts...)
	}
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()

	counters := b.Counters()
	now := time.Now()
	start0 := now
	for i := range n {
		var send []bus.SendOption
		if kind == InboxStale {
			send = append(send, bus.WithVersion(fmt.Sprint(i%entities), now.Add(time.Duration(i))))
		}
		if copies > 1 { // one ID for every copy; otherwise the bus's UUIDv7
			send = append(send, bus.WithMessageID(fmt.Sprintf("bench-%d-%08d", start0.UnixNano(), i)))
		}
		for range copies {
			if err := bus.Send(ctx, b, &Work{I: i}, send...); err != nil {
				return 0, err
			}
		}
	}
	if err := meter.start(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	close(gate)
	deadline := time.After(10 * time.Minute)
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-done:
			elapsed := time.Since(start)
			if err := meter.stop(ctx); err != nil {
				return 0, err
			}
			// Settled, not handled: at concurrency above one a stale run may
			// see an entity's newer update first and skip the older one.
			if counters.Total(metrics.Failed) > 0 || settled(counters) != uint64(total) {
				return 0, fmt.Errorf("a benchmark run settled %d of %d messages, %d failed", settled(counters), total, counters.Total(metrics.Failed))
			}
			return elapsed, nil
		case <-check.C:
			if counters.Total(metrics.Failed) > 0 {
				return 0, errors.New("a benchmark message failed")
			}
		case <-deadline:
			return 0, errors.New("benchmark run did not finish")
		}
	}
}

const insertBusinessGorm = "INSERT INTO business (message_id, amount) VALUES (?, ?)"

func settled(c *metrics.Counters) uint64 {
	return c.Total(metrics.Handled) + c.Total(metrics.Duplicate) + c.Total(metrics.Stale) + c.Total(metrics.Failed)
}

// runAndSend runs b and sends it Work 0..n-1; stop ends the run.
func runAndSend(ctx context.Context, b *bus.Bus, n int64) (stop context.CancelFunc, err error) {
	runCtx, stop := context.WithCancel(ctx)
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()
	for i := range n {
		if err := bus.Send(ctx, b, &Work{I: i}); err != nil {
			return stop, err
		}
	}
	return stop, nil
}

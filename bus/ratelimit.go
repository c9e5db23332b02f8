package bus

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/metrics"
)

// RateLimit configures automatic rate limiting: when a handler fails to
// reach its database Threshold times in a row, it goes down to one attempt
// at a time, Wait apart, until one begun after the failures succeeds.
// Meanwhile such failures spend no retries: an outage of the database
// leaves the messages in their queue, not in the error topic.
type RateLimit struct {
	// Disabled turns rate limiting off: an outage longer than the retries
	// moves the messages to the error topic.
	Disabled bool
	// Threshold is how many consecutive transient failures start the
	// limiting. Defaults to 10.
	Threshold int
	// Wait is the pause before each attempt while limited. Defaults to 1s.
	Wait time.Duration
	// MaxWait bounds how long one message waits without spending its
	// retries, so a message whose own failure only looks like an outage
	// cannot hold the handler forever. Defaults to 5 minutes.
	MaxWait time.Duration
}

const (
	rateLimitThresholdDefault = 10
	rateLimitWaitDefault      = time.Second
	rateLimitMaxWaitDefault   = 5 * time.Minute
)

// limiter is one handler's rate limiting: while open, its attempts take a
// single slot in turn.
type limiter struct {
	handler string
	cfg     RateLimit
	log     *slog.Logger
	gauges  metrics.GaugeSetter // nil: no gauge

	// open, begun, newestSuccess and failures are read without the lock,
	// so an attempt of a handler not limited takes none; open and failures
	// change under mu.
	open atomic.Bool
	// begun numbers the attempts as they begin; newestSuccess is the
	// greatest number of one that succeeded, proof that the database was
	// reachable after it began (one begun earlier may succeed mid-outage).
	begun         atomic.Uint64
	newestSuccess atomic.Uint64
	failures      atomic.Int64 // consecutive transient failures

	mu           sync.Mutex
	slot         chan struct{}
	failingSince uint64 // the last attempt begun at the first of the consecutive failures
	openedAt     uint64 // the last attempt begun when the limiting started
}

// begin numbers an attempt that begins, for record.
func (l *limiter) begin() uint64 { return l.begun.Add(1) }

// mark returns the number of the last attempt begun, for succeededSince.
func (l *limiter) mark() uint64 { return l.begun.Load() }

// succeededSince reports whether an attempt begun after mark succeeded.
func (l *limiter) succeededSince(mark uint64) bool { return l.newestSuccess.Load() > mark }

func newLimiter(handler string, cfg RateLimit, log *slog.Logger, rec metrics.Recorder) *limiter {
	l := &limiter{handler: handler, cfg: cfg, log: log, slot: make(chan struct{}, 1)}
	l.gauges, _ = rec.(metrics.GaugeSetter)
	return l
}

// acquire returns at once while the handler is not limited; else it takes
// the one slot and waits cfg.Wait, release giving the slot back. It fails
// only when ctx ends or the bus stops.
func (l *limiter) acquire(ctx context.Context, stop <-chan struct{}) (release func(), limited bool, err error) {
	if !l.open.Load() {
		return func() {}, false, nil
	}
	select {
	case l.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-stop:
		return nil, false, errStopping
	}
	release = func() { <-l.slot }
	if !l.open.Load() { // it ended while this attempt waited for the slot
		release()
		return func() {}, false, nil
	}
	select {
	case <-time.After(l.cfg.Wait):
	case <-ctx.Done():
		release()
		return nil, false, ctx.Err()
	case <-stop:
		release()
		return nil, false, errStopping
	}
	return release, true, nil
}

// record counts the outcome of the attempt numbered n (begin): a success
// begun after the run of failures (or the limiting) began ends both; a
// transient failure may start the limiting; others change nothing.
func (l *limiter) record(n uint64, ok, transient bool) {
	switch {
	case ok:
		for newest := l.newestSuccess.Load(); n > newest && !l.newestSuccess.CompareAndSwap(newest, n); newest = l.newestSuccess.Load() {
		}
		if l.failures.Load() == 0 && !l.open.Load() {
			return // the usual case: nothing to change
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		floor := l.failingSince
		if l.open.Load() {
			floor = l.openedAt
		}
		if n <= floor {
			return // it began before the outage: no proof that it ended
		}
		l.failures.Store(0)
		l.set(false)
	case transient:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.failures.Add(1) == 1 {
			l.failingSince = l.mark()
		}
		if l.failures.Load() >= int64(l.cfg.Threshold) {
			l.set(true)
		}
	}
}

// start starts the limiting now (retries ran out on transient failures).
func (l *limiter) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set(true)
}

// set changes the state, logging and reporting it; l.mu is held.
func (l *limiter) set(open bool) {
	if l.open.Load() == open {
		return
	}
	l.open.Store(open)
	value := 0.0
	if open {
		l.openedAt = l.mark()
		value = 1
		l.log.Warn("bus: rate limiting a handler that cannot reach its database: one attempt at a time until one of them succeeds",
			"handler", l.handler, "consecutive_failures", l.failures.Load(), "wait", l.cfg.Wait)
	} else {
		l.log.Info("bus: rate limiting ended: an attempt succeeded", "handler", l.handler)
	}
	if l.gauges != nil {
		l.gauges.SetGauge(metrics.Gauge(metricseries.RateLimited(l.handler)), value)
	}
}

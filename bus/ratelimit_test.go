package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestRateLimitingWaitsOutTransientFailures: a handler whose database is out
// of reach (its attempts fail with "connection refused") for longer than
// its retries keeps its messages: the handler goes down to one attempt at a
// time, the messages are handled once the database is back, none reaches
// the error topic, and the rate_limited gauge goes up, then down. A
// failure that is not transient still goes to the error topic after the
// retries.
func TestRateLimitingWaitsOutTransientFailures(t *testing.T) {
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("limited"), ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Retry:     bus.RetryPolicy{MaxRetries: 2, InitialBackoff: time.Millisecond},
		RateLimit: bus.RateLimit{Threshold: 3, Wait: 10 * time.Millisecond}, Concurrency: 4})
	require.NoError(t, err)
	var down atomic.Bool
	down.Store(true)
	var concurrent, maxConcurrent, attempts atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, o *OrderPlaced) error {
		n := concurrent.Add(1)
		defer concurrent.Add(-1)
		if attempts.Add(1) > 20 && n > maxConcurrent.Load() {
			maxConcurrent.Store(n) // once limited: one at a time
		}
		if o.OrderID == "bad" {
			return fmt.Errorf("customer missing")
		}
		if down.Load() {
			return fmt.Errorf("store: begin: dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED)
		}
		return nil
	}))
	ep := start(t, b, errorTopic)
	for i := range 5 {
		require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{OrderID: fmt.Sprint(i)}))
	}
	c := b.Counters()
	limited := func() float64 {
		v, _ := c.GetGauge(metrics.Gauge(metricseries.RateLimited("sales.OrderPlaced")))
		return v
	}
	waitFor(t, "the handler to be rate limited", func() bool {
		return limited() == 1 && attempts.Load() > 30
	})
	require.Zero(t, c.Get("sales.OrderPlaced", metrics.Failed), "no message went to the error topic")
	down.Store(false)
	waitFor(t, "every message handled", func() bool { return c.Get("sales.OrderPlaced", metrics.Handled) == 5 })
	require.Zero(t, c.Get("sales.OrderPlaced", metrics.Failed))
	require.Zero(t, limited(), "a success ended the limiting")
	require.LessOrEqual(t, maxConcurrent.Load(), int32(1), "one attempt at a time while limited")

	require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{OrderID: "bad"}))
	failed := <-ep.errors
	require.Equal(t, 3, bus.ErrorAttempts(failed), "a failure that is not transient spends the retries")
}

// startLimited runs a bus for the tests of a success's place in an
// outage, with handler h: two messages at a time, 2 retries a millisecond
// apart, a 10 ms Wait under the limiting; it logs to logs.
func startLimited(t *testing.T, logs *recordedLogs, maxWait time.Duration, h func(context.Context, *OrderPlaced) error) *endpoint {
	t.Helper()
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("limited"), ErrorTopic: errorTopic, Logger: slog.New(logs),
		Retry:     bus.RetryPolicy{MaxRetries: 2, InitialBackoff: time.Millisecond},
		RateLimit: bus.RateLimit{Wait: 10 * time.Millisecond, MaxWait: maxWait}, Concurrency: 2})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, h))
	return start(t, b, errorTopic)
}

// await waits for ch, at most 20 s: a test whose rule broke in another way
// fails, where it would hang. It may be called from a handler.
func await(t *testing.T, ch <-chan struct{}, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(20 * time.Second):
		t.Errorf("timed out waiting for %s", what)
		return false
	}
}

// noneInErrorTopic fails if a message reached ep's error topic.
func noneInErrorTopic(t *testing.T, ep *endpoint) {
	t.Helper()
	select {
	case failed := <-ep.errors:
		t.Fatalf("message %s reached the error topic: %s", failed.UUID, failed.Metadata.Get("postroom-error-reason"))
	default:
	}
}

var errTimedOut = errors.New("test: timed out")

// TestACommitInFlightAtAnOutageDoesNotEndIt: when the database goes away,
// an attempt that began before (its COMMIT on its way) may still succeed
// after another message's first attempt failed. That success does not
// prove the database reachable: the other message waits the outage out
// and reaches no error topic. Retries counted from that success on would
// send it to the error topic 0.7 s into the outage (in
// TestMariaDBKilledThenStopped, a message left without its effect after a
// slow MariaDB stop). Nor does that success end the rate limiting.
func TestACommitInFlightAtAnOutageDoesNotEndIt(t *testing.T) {
	logs := newRecordedLogs()
	var down atomic.Bool
	down.Store(true)
	// No sleeps: the in-flight attempt has begun before the other's first
	// attempt ends (entered), and succeeds only once the other's retries
	// ran out and it waits under the limiting (its fourth attempt, with
	// MaxRetries 2: limited).
	entered, limited := make(chan struct{}), make(chan struct{})
	var cutAttempts atomic.Int32
	ep := startLimited(t, logs, 0, func(ctx context.Context, o *OrderPlaced) error {
		switch {
		case o.OrderID == "in-flight":
			close(entered)
			// The COMMIT was sent before the outage began; its answer
			// comes after the other's failures.
			if !await(t, limited, "the other message to be rate limited") {
				return errTimedOut
			}
			return nil
		case down.Load():
			switch cutAttempts.Add(1) {
			case 1:
				if !await(t, entered, "the in-flight attempt to begin") {
					return errTimedOut
				}
			case 4:
				close(limited)
			}
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}
		return nil
	})
	require.NoError(t, bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: "in-flight"}))
	require.NoError(t, bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: "cut"}))
	c := ep.Counters()
	waitFor(t, "the in-flight message handled", func() bool { return c.Get("sales.OrderPlaced", metrics.Handled) == 1 })
	after := cutAttempts.Load()
	waitFor(t, "the other message's attempts to go on failing, or it to reach the error topic", func() bool {
		return cutAttempts.Load() > after+5 || len(ep.errors) > 0
	})
	noneInErrorTopic(t, ep)
	down.Store(false)
	waitFor(t, "the message cut by the outage handled, or in the error topic", func() bool {
		return c.Get("sales.OrderPlaced", metrics.Handled) == 2 || len(ep.errors) > 0
	})
	noneInErrorTopic(t, ep)
	require.Zero(t, c.Get("sales.OrderPlaced", metrics.Failed), "no message went to the error topic")
	// Nor did that success end the rate limiting: it ended once, when the
	// database was back.
	_, ended := logs.find(slog.LevelInfo, "bus: rate limiting ended")
	require.Equal(t, 1, ended, "times the rate limiting ended:\n%s", logs.joined(slog.LevelWarn, "bus: rate limiting"))
}

// TestASuccessEarlyInAnOutageDoesNotEndIt: as the database goes, a
// statement on a connection it has not closed yet may succeed after a
// message's first failure, on a new connection, was refused. That success,
// begun after the failure, costs the message a retry, no more: its later
// failures have none between them, so it waits the outage out and reaches
// no error topic. Counting any success begun after its first failure would
// send it to the error topic. (One between its last two failures would
// still send it there.)
func TestASuccessEarlyInAnOutageDoesNotEndIt(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	second, early := make(chan struct{}), make(chan struct{})
	var attempts atomic.Int32
	ep := startLimited(t, newRecordedLogs(), 0, func(ctx context.Context, o *OrderPlaced) error {
		if o.OrderID == "early" || !down.Load() {
			return nil
		}
		if attempts.Add(1) == 2 { // its first failure counted: the other message begins and succeeds meanwhile
			close(second)
			if !await(t, early, "the early message handled") {
				return errTimedOut
			}
		}
		return fmt.Errorf("store: begin: dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED)
	})
	require.NoError(t, bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: "cut"}))
	require.True(t, await(t, second, "the second attempt"))
	require.NoError(t, bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: "early"}))
	c := ep.Counters()
	waitFor(t, "the early message handled", func() bool { return c.Get("sales.OrderPlaced", metrics.Handled) == 1 })
	close(early)
	waitFor(t, "the other message's attempts to go on failing, or it to reach the error topic", func() bool {
		return attempts.Load() > 8 || len(ep.errors) > 0
	})
	down.Store(false)
	waitFor(t, "the message cut by the outage handled, or in the error topic", func() bool {
		return c.Get("sales.OrderPlaced", metrics.Handled) == 2 || len(ep.errors) > 0
	})
	noneInErrorTopic(t, ep)
}

// TestAFailureOfItsOwnIsNotWaitedOutUnderTraffic: a message whose
// connection error is its own, while the handler's other messages keep
// succeeding, spends its retries and reaches the error topic long before
// RateLimit.MaxWait: the rule of the two tests above (a success must come
// between two of its failures) does not make it wait the outage it is
// not in. Its failures count as transient (said at warn), so the rule was
// asked.
func TestAFailureOfItsOwnIsNotWaitedOutUnderTraffic(t *testing.T) {
	logs := newRecordedLogs()
	ep := startLimited(t, logs, time.Minute, func(ctx context.Context, o *OrderPlaced) error {
		if o.OrderID == "unlucky" {
			return fmt.Errorf("its own database link: %w", syscall.ECONNREFUSED)
		}
		return nil
	})
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			_ = bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: fmt.Sprint(i)})
		}
	})
	defer func() {
		close(stop)
		traffic.Wait()
	}()
	began := time.Now()
	require.NoError(t, bus.Publish(context.Background(), ep.Bus, &OrderPlaced{OrderID: "unlucky"}))
	select {
	case failed := <-ep.errors:
		require.Contains(t, failed.Metadata.Get("postroom-error-reason"), "its own database link")
		t.Logf("in the error topic %s after it was published", time.Since(began).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("a message whose failure was its own waited as in an outage, under traffic")
	}
	require.Contains(t, logs.joined(slog.LevelWarn, "its own database link"), "transient=true")
}

// TestATransientFailureOfOneMessageIsNotAnOutage: a message that keeps
// failing with a connection error (one only it uses) waits at most
// RateLimit.MaxWait without spending retries, then spends them and reaches
// the error topic; the messages behind it are handled.
func TestATransientFailureOfOneMessageIsNotAnOutage(t *testing.T) {
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("limited"), ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Retry:     bus.RetryPolicy{MaxRetries: 2, InitialBackoff: time.Millisecond},
		RateLimit: bus.RateLimit{Threshold: 1, Wait: time.Millisecond, MaxWait: 200 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, o *OrderPlaced) error {
		if o.OrderID == "unlucky" {
			return fmt.Errorf("its own database link: %w", syscall.ECONNREFUSED)
		}
		return nil
	}))
	ep := start(t, b, errorTopic)
	require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{OrderID: "unlucky"}))
	for i := range 20 { // the handler keeps succeeding meanwhile
		require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{OrderID: fmt.Sprint(i)}))
	}
	select {
	case failed := <-ep.errors:
		require.Contains(t, failed.Metadata.Get("postroom-error-reason"), "connection refused")
	case <-time.After(20 * time.Second):
		t.Fatal("a message whose failure was not an outage waited forever")
	}
	waitFor(t, "the messages behind it", func() bool { return b.Counters().Get("sales.OrderPlaced", metrics.Handled) == 20 })
}

// TestAStopDoesNotWaitForRateLimitedMessages: messages waiting their turn
// under rate limiting (the database out of reach) are not running: a stop
// gives them back at once instead of holding on for StopTimeout, which
// would make every stop during an outage take the whole 20 s.
func TestAStopDoesNotWaitForRateLimitedMessages(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("limited"), Logger: testenv.Logger(t),
		Retry:       bus.RetryPolicy{MaxRetries: 2, InitialBackoff: time.Millisecond},
		RateLimit:   bus.RateLimit{Threshold: 3, Wait: time.Second},
		Concurrency: 4, StopTimeout: 20 * time.Second})
	require.NoError(t, err)
	var attempts atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, o *OrderPlaced) error {
		attempts.Add(1)
		return fmt.Errorf("store: begin: dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	for i := range 5 {
		require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{OrderID: fmt.Sprint(i)}))
	}
	limited := func() float64 {
		v, _ := b.Counters().GetGauge(metrics.Gauge(metricseries.RateLimited("sales.OrderPlaced")))
		return v
	}
	waitFor(t, "the handler to be rate limited", func() bool { return limited() == 1 })
	began := time.Now()
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
	require.Less(t, time.Since(began), 5*time.Second, "the stop gave the waiting messages back")
}

// TestARateLimitedOutageIsQuiet: while the handler waits out an outage of
// the database under rate limiting (2 s at a Wait of 20 ms, a hundred
// attempts), it logs a few lines, not one warning per attempt, and counts
// no retries: none is spent (docs/recoverability.md). It must not log
// "attempt failed" at warn and count a retry for every attempt.
func TestARateLimitedOutageIsQuiet(t *testing.T) {
	logs := newRecordedLogs()
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}),
		RateLimit: bus.RateLimit{Threshold: 2, Wait: 20 * time.Millisecond, MaxWait: time.Minute},
		Retry:     bus.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Millisecond}, Logger: slog.New(logs)})
	require.NoError(t, err)
	var down atomic.Bool
	down.Store(true)
	ok := make(chan struct{}, 1)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error {
		if down.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		ok <- struct{}{}
		return nil
	}))
	start(t, b, "error")
	require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o"}, bus.To(b.Endpoint())))
	time.Sleep(2 * time.Second)
	down.Store(false)
	<-ok
	_, warns := logs.find(slog.LevelWarn, "bus: attempt failed")
	require.LessOrEqual(t, warns, 5, "warnings of failed attempts during a rate-limited outage")
	require.LessOrEqual(t, b.Counters().Get(bus.MessageName[CreateInvoice](), metrics.Retried), uint64(1), "retries counted while waiting out the outage")
}

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
)

// checkStopDrains: a stop lets the message being handled finish within
// Config.StopTimeout: its handler's context is not cancelled, its writes
// commit, it is acked, and no instance handles it again (the handler has
// no inbox: a second delivery would write twice). The same for a stop by
// Run's context and by Close. A handler still running at StopTimeout has
// its context cancelled: its writes roll back and its message goes back to
// the broker, to be handled by the next instance. A stop that cancels the
// handlers in flight at once fails this (docs/decisions.md); so does a
// drain behind which Watermill's router closes the subscriber at once,
// giving back the messages finishing in the drain: they are handled again
// after every stop by Close and one in four by Run's context.
func checkStopDrains(t *testing.T, c *confCase) {
	endpoint := testenv.Name("drain")
	started := make(chan string, 4)
	release := make(chan struct{})
	handler := func(ctx context.Context, _ *ConfCmd) error {
		started <- bus.MessageID(ctx)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return record[ConfCmd](c, "cmd")(ctx, nil)
	}
	newBus := func(stopTimeout time.Duration) *bus.Bus {
		b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Endpoint, cfg.StopTimeout = endpoint, stopTimeout })
		require.NoError(t, bus.Handle(b, handler, bus.WithTransaction()))
		return b
	}
	// runUntil runs b; its stop function ends Run's context, or calls
	// Close while Run runs, and returns how long the stop took.
	runUntil := func(b *bus.Bus, byClose bool) (stop func() (time.Duration, error)) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		select {
		case <-b.Running():
		case <-time.After(30 * time.Second):
			t.Fatal("the bus did not run")
		}
		return func() (time.Duration, error) {
			began := time.Now()
			var closeErr error
			if byClose {
				closeErr = b.Close()
			} else {
				cancel()
			}
			err := <-done
			cancel()
			return time.Since(began), errors.Join(err, closeErr, b.Close())
		}
	}
	want := map[string]int{}

	// Within StopTimeout, by Run's context, then by Close: finished and acked.
	for _, byClose := range []bool{false, true} {
		release = make(chan struct{})
		b := newBus(20 * time.Second)
		stop := runUntil(b, byClose)
		id := testenv.Name("drained-")
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.To(endpoint), bus.WithMessageID(id)))
		require.Equal(t, id, <-started)
		stopped := make(chan struct{})
		go func() {
			took, err := stop()
			require.NoError(t, err)
			require.Less(t, took, 15*time.Second)
			close(stopped)
		}()
		time.Sleep(300 * time.Millisecond) // the stop has begun
		select {
		case <-stopped:
			t.Fatalf("the stop (by Close: %v) did not wait for the handler in flight", byClose)
		default:
		}
		close(release)
		<-stopped
		want["cmd "+id] = 1
		require.Equal(t, want, effects(t, c), "its writes committed (by Close: %v)", byClose)
	}

	// Past StopTimeout: cancelled, given back, handled by the next instance.
	release = make(chan struct{})
	second := newBus(time.Second)
	stop := runUntil(second, false)
	late := testenv.Name("late-")
	require.NoError(t, bus.Send(context.Background(), second, &ConfCmd{}, bus.To(endpoint), bus.WithMessageID(late)))
	require.Equal(t, late, <-started)
	took, err := stop()
	require.NoError(t, err)
	require.GreaterOrEqual(t, took, 900*time.Millisecond, "it had StopTimeout to finish")
	require.Less(t, took, 15*time.Second)
	require.Equal(t, want, effects(t, c), "the cancelled attempt rolled back")

	close(release)
	third := newBus(20 * time.Second)
	run(t, third)
	require.Equal(t, late, <-started, "given back, and handled by the next instance")
	settled(t, third, "conf.Cmd", 1)
	want["cmd "+late] = 1
	require.Equal(t, want, effects(t, c))
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, 1, third.Counters().Get("conf.Cmd", metrics.Handled), "the drained messages were not delivered again")
	require.Empty(t, started)
	require.Equal(t, want, effects(t, c))
}

// checkHandleBatchSendsOnStop: a HandleBatch handler without the inbox or
// the outbox publishes one event per message; the broker refuses every
// publish until the stop. What a call sent is dispatched after its commit,
// so no message of the call may be acked before that dispatch succeeds:
// each goes back to the broker, is named at error, and the next instance
// runs fn again for every one. If only a call's first message goes back,
// the others are acked and their events never sent. On a sequential
// transport (SQL) a call holds one message, and the first is retried
// until the stop while the others wait behind it.
func checkHandleBatchSendsOnStop(t *testing.T, c *confCase) {
	endpoint := testenv.Name("batchsends")
	var mu sync.Mutex
	seen := map[int]int{} // message N: calls of fn whose sends returned
	newBus := func(tr transport.Transport, logger *slog.Logger) *bus.Bus {
		b := newConfBus(t, c, func(cfg *bus.Config) {
			cfg.Endpoint, cfg.Transport, cfg.StopTimeout = endpoint, tr, 2*time.Second
			if logger != nil {
				cfg.Logger = logger
			}
		})
		require.NoError(t, bus.HandleBatch(b, func(ctx context.Context, ms []*ConfCmd) error {
			for _, m := range ms {
				if err := bus.Publish(ctx, b, &ConfRelayed{From: fmt.Sprint(m.N)}); err != nil {
					return err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				seen[m.N]++
			}
			return nil
		}, bus.WithBatch(10, 300*time.Millisecond)))
		return b
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }

	logs := newRecordedLogs()
	first := newBus(refusingTransport{c.tr}, slog.New(logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	<-first.Running()
	sender := newConfBus(t, c, nil)
	var ids []string
	for n := 1; n <= 5; n++ {
		id := testenv.Name("cut-")
		ids = append(ids, id)
		require.NoError(t, bus.Send(context.Background(), sender, &ConfCmd{N: n}, bus.To(endpoint), bus.WithMessageID(id)))
	}
	// A sequential transport (SQL) hands out a group's next message only
	// once this one is settled: the first is retried, the rest wait.
	reached := 5
	if c.tr.Capabilities().Sequential {
		reached = 1
	}
	waitFor(t, fmt.Sprintf("fn to see %d commands", reached), func() bool { return count() == reached })
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, first.Close())
	lost := logs.joined(slog.LevelError, "messages it sent were not dispatched")
	for _, id := range ids[:reached] {
		require.Contains(t, lost, id, "each message whose call's events were not dispatched is named at error")
	}
	mu.Lock()
	seen = map[int]int{}
	mu.Unlock()

	next := newBus(c.tr, nil)
	run(t, next)
	waitFor(t, "the next instance to run fn again for the five commands", func() bool { return count() == 5 })
}

// refusingTransport is a check's transport whose broker refuses every
// publish, mandatory ones included; it keeps what else the transport says
// of itself (its Capabilities).
type refusingTransport struct{ transport.Transport }

func (t refusingTransport) Publisher() message.Publisher {
	return brokenPublisher{t.Transport.Publisher()}
}

func (refusingTransport) PublishMandatory(string, ...*message.Message) error {
	return errors.New("failpoint: broker unreachable")
}

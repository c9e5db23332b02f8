package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
)

// checkStopDrains: a stop lets the message being handled finish within
// Config.StopTimeout: its handler's context is not cancelled, its writes
// commit, it is acked, and no instance handles it again (the handler has
// no inbox: a second delivery would write twice). The same for a stop by
// Run's context and by Close. A handler still running at StopTimeout has
// its context cancelled: its writes roll back and its message goes back to
// the broker, to be handled by the next instance. Before, every stop
// cancelled the handlers in flight at once (docs/decisions.md); and then,
// with the drain, Watermill's router closed the subscriber at once, which
// gave back the messages finishing in the drain: every stop by Close, one
// in four by Run's context, handled them again (found by a cold trial).
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

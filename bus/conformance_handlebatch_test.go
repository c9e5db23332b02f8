package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// Conformance checks of batch handlers (bus.HandleBatch), on every store
// and transport: the inbox holds for each message of a batch, and a
// failing message is retried alone.

// batchCalls records the messages (their N) of each call of a batch
// handler, and writes one effect per message through the batch's
// transaction. With countDeliveries, a first call of one message waits
// until two more deliveries have reached the bus, so that messages
// handled at the same time share a call however they arrive.
type batchCalls struct {
	mu    sync.Mutex
	calls [][]int

	delivered atomic.Int32  // deliveries that reached the bus's Middleware
	arrival   chan struct{} // a token after each of them
}

// countDeliveries sets a bus Middleware that counts the deliveries.
func (l *batchCalls) countDeliveries(cfg *bus.Config) {
	l.arrival = make(chan struct{}, 1)
	cfg.Middleware = append(cfg.Middleware, func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			l.delivered.Add(1)
			select {
			case l.arrival <- struct{}{}:
			default:
			}
			return h(msg)
		}
	})
}

// awaitDeliveries waits until n deliveries reached the bus, at most 20 s
// (then the check that calls share messages says what went wrong); at
// once without countDeliveries.
func (l *batchCalls) awaitDeliveries(n int32) {
	if l.arrival == nil {
		return
	}
	deadline := time.After(20 * time.Second)
	for l.delivered.Load() < n {
		select {
		case <-l.arrival:
		case <-deadline:
			return
		}
	}
}

func (l *batchCalls) handler(c *confCase, fail func(call []int, n int) error) bus.BatchFunc[ConfCmd] {
	return func(ctx context.Context, ms []*ConfCmd) error {
		ids := bus.MessageIDs(ctx)
		if len(ids) != len(ms) {
			return fmt.Errorf("MessageIDs: %d IDs for %d messages", len(ids), len(ms))
		}
		call := make([]int, len(ms))
		for i, m := range ms {
			call[i] = m.N
			if !strings.HasSuffix(ids[i], "-"+strconv.Itoa(m.N)) { // sendBatch's IDs end with N
				return fmt.Errorf("MessageIDs: %s is not the ID of message %d", ids[i], m.N)
			}
		}
		l.mu.Lock()
		l.calls = append(l.calls, call)
		first := len(l.calls) == 1
		l.mu.Unlock()
		if first && len(ms) == 1 {
			// Held until two more deliveries are in flight: the batch
			// handler's messages in flight include this one, so the next
			// batch does not close before they joined it (batches of
			// more than one form whatever the speed of the store against
			// the transport's).
			l.awaitDeliveries(3)
		}
		for _, m := range ms {
			if err := unitofwork.Tx(ctx).Exec("INSERT INTO "+c.effects+" (consumer, id) VALUES (?, ?)", "batch", strconv.Itoa(m.N)).Error; err != nil {
				return err
			}
		}
		for _, m := range ms { // after the writes, which must then vanish
			if err := fail(call, m.N); err != nil {
				return err
			}
		}
		return nil
	}
}

// seen returns how many calls saw n, and the largest call.
func (l *batchCalls) seen(n int) (times, largest int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, call := range l.calls {
		largest = max(largest, len(call))
		for _, x := range call {
			if x == n {
				times++
			}
		}
	}
	return times, largest
}

// sendBatch sends a command per n, each with ID id(n), before the bus runs:
// they are handled at the same time.
func sendBatch(t *testing.T, b *bus.Bus, ns []int, id func(int) string) map[string]int {
	t.Helper()
	want := map[string]int{}
	for _, n := range ns {
		want["batch "+strconv.Itoa(n)] = 1
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: n}, bus.WithMessageID(id(n))))
	}
	return want
}

// checkHandleBatchFailing: eight commands are handled at the same time;
// the batch holding the fourth fails after its writes, and so does the
// fourth alone, once. Each is applied once: the others commit when handled
// alone, the fourth when the bus retries it.
func checkHandleBatchFailing(t *testing.T, c *confCase) {
	var calls batchCalls
	b := newConfBus(t, c, calls.countDeliveries)
	var failures atomic.Int32
	require.NoError(t, bus.HandleBatch(b, calls.handler(c, func(_ []int, n int) error {
		if n == 3 && failures.Add(1) <= 2 {
			return errors.New("fails twice, after its writes")
		}
		return nil
	}), bus.WithInbox(), bus.WithBatch(8, time.Second)))
	prefix := testenv.Name("hb-fail-") + "-"
	want := sendBatch(t, b, []int{0, 1, 2, 3, 4, 5, 6, 7}, func(n int) string { return prefix + strconv.Itoa(n) })
	run(t, b)
	settled(t, b, "conf.Cmd", 8)
	require.Equal(t, want, effects(t, c), "each message applied once; the failed calls' writes rolled back")
	require.EqualValues(t, 8, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 0, b.Counters().Get("conf.Cmd", metrics.Failed))
	times, largest := calls.seen(3)
	require.Greater(t, largest, 1, "messages handled at the same time share a call")
	require.Equal(t, 3, times, "in its batch, alone, and alone again when the bus retried it")
}

// checkHandleBatchDuplicates: one message is handled; then it arrives
// again with two copies of a second and three of a third, handled at the
// same time. The handler sees each once; the four duplicates are skipped
// and counted, in the process and on their inbox rows.
func checkHandleBatchDuplicates(t *testing.T, c *confCase) {
	var calls batchCalls
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.HandleBatch(b, calls.handler(c, func([]int, int) error { return nil }), bus.WithInbox(), bus.WithBatch(8, 500*time.Millisecond)))
	run(t, b)
	prefix := testenv.Name("hb-dup-") + "-"
	id := func(n int) string { return prefix + strconv.Itoa(n) }
	want := sendBatch(t, b, []int{1}, id)
	settled(t, b, "conf.Cmd", 1)
	for k, v := range sendBatch(t, b, []int{1, 2, 3, 2, 3, 3}, id) {
		want[k] = v
	}
	settled(t, b, "conf.Cmd", 7)
	require.Equal(t, want, effects(t, c))
	for n := 1; n <= 3; n++ {
		times, _ := calls.seen(n)
		require.Equal(t, 1, times, "the handler never saw a duplicate of %d", n)
	}
	require.EqualValues(t, 3, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 4, b.Counters().Get("conf.Cmd", metrics.Duplicate))
	duplicatesCounted(t, c, b, 4)
}

// checkHandleBatchPoison: of six commands handled at the same time, one
// makes the handler panic every time and one is unrecoverable: both go to
// the error topic, the four others are applied once.
func checkHandleBatchPoison(t *testing.T, c *confCase) {
	var calls batchCalls
	b := newConfBus(t, c, calls.countDeliveries)
	require.NoError(t, bus.HandleBatch(b, calls.handler(c, func(_ []int, n int) error {
		switch n {
		case 2:
			panic("poison")
		case 4:
			return bus.Unrecoverable(errors.New("no such customer"))
		}
		return nil
	}), bus.WithInbox(), bus.WithBatch(8, 500*time.Millisecond)))
	prefix := testenv.Name("hb-poison-") + "-"
	want := sendBatch(t, b, []int{0, 1, 2, 3, 4, 5}, func(n int) string { return prefix + strconv.Itoa(n) })
	delete(want, "batch 2")
	delete(want, "batch 4")
	run(t, b)
	settled(t, b, "conf.Cmd", 6)
	require.Equal(t, want, effects(t, c), "the others applied once; nothing of the poison messages")
	require.EqualValues(t, 4, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 2, b.Counters().Get("conf.Cmd", metrics.Failed), "both in the error topic")
	_, largest := calls.seen(0)
	require.Greater(t, largest, 1, "messages handled at the same time share a call")
}

// checkHandleBatchCopyOfFailed: two messages with one inbox key (10 and
// 11: a sender's corrected resend under the same interchange number) are
// handled at the same time with four others; 10 always fails. The later
// copy of a key is a duplicate only if the first commits: whichever comes
// first, 11 is applied once, and 10 is skipped as its duplicate or goes to
// the error topic, never both lost.
func checkHandleBatchCopyOfFailed(t *testing.T, c *confCase) {
	var calls batchCalls
	b := newConfBus(t, c, nil)
	prefix := testenv.Name("hb-copy-") + "-"
	sameKey := func(msg *message.Message) (inbox.Key, error) {
		if strings.HasSuffix(msg.UUID, "-10") || strings.HasSuffix(msg.UUID, "-11") {
			return inbox.Key{MessageID: prefix + "resent"}, nil
		}
		return inbox.Key{MessageID: msg.UUID}, nil
	}
	require.NoError(t, bus.HandleBatch(b, calls.handler(c, func(_ []int, n int) error {
		if n == 10 {
			return bus.Unrecoverable(errors.New("interchange 10 is malformed"))
		}
		return nil
	}), bus.WithInbox(bus.Inbox{Key: sameKey}), bus.WithBatch(8, 500*time.Millisecond)))
	want := sendBatch(t, b, []int{0, 10, 1, 11, 2, 3}, func(n int) string { return prefix + strconv.Itoa(n) })
	delete(want, "batch 10")
	run(t, b)
	settled(t, b, "conf.Cmd", 6)
	require.Equal(t, want, effects(t, c), "11 applied once, whether it came before 10 or after")
	require.EqualValues(t, 5, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Failed)+b.Counters().Get("conf.Cmd", metrics.Duplicate),
		"10 in the error topic, or skipped as a duplicate of 11 once 11 committed")
}

// checkHandleBatchSwallowedError: of eight commands handled at the same
// time, the handler runs a statement for the fourth that fails, and does
// not return its error, twice. On PostgreSQL that aborts the transaction:
// the call fails at its savepoint, each message runs alone, and the fourth
// fails alone again; the others are in two calls, not retried with it.
// Elsewhere the transaction goes on. Each is applied once.
func checkHandleBatchSwallowedError(t *testing.T, c *confCase) {
	var calls batchCalls
	b := newConfBus(t, c, calls.countDeliveries)
	var swallowed atomic.Int32
	record := calls.handler(c, func([]int, int) error { return nil })
	require.NoError(t, bus.HandleBatch(b, func(ctx context.Context, ms []*ConfCmd) error {
		if err := record(ctx, ms); err != nil {
			return err
		}
		for _, m := range ms {
			if m.N == 3 && swallowed.Add(1) <= 2 {
				_ = unitofwork.Tx(ctx).Exec("INSERT INTO no_such_table (id) VALUES ('x')").Error // the error ignored
			}
		}
		return nil
	}, bus.WithInbox(), bus.WithBatch(8, time.Second)))
	prefix := testenv.Name("hb-swallow-") + "-"
	want := sendBatch(t, b, []int{0, 1, 2, 3, 4, 5, 6, 7}, func(n int) string { return prefix + strconv.Itoa(n) })
	run(t, b)
	settled(t, b, "conf.Cmd", 8)
	require.Equal(t, want, effects(t, c), "each applied once; what the aborted calls wrote rolled back")
	require.EqualValues(t, 0, b.Counters().Get("conf.Cmd", metrics.Failed))
	_, largest := calls.seen(0)
	require.Greater(t, largest, 1, "messages handled at the same time share a call")
	for _, n := range []int{0, 1, 2, 4, 5, 6, 7} {
		times, _ := calls.seen(n)
		require.LessOrEqual(t, times, 2, "message %d was retried with the one whose call swallowed an error", n)
	}
}

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// Conformance checks of batched commits (bus.WithBatch), on every store and
// transport: every rule of one message holds for each member of a batch.

// batchLog records, per message ID, the transactions its attempts ran in.
type batchLog struct {
	mu  sync.Mutex
	txs map[string][]string
}

func (l *batchLog) add(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.txs == nil {
		l.txs = map[string][]string{}
	}
	id := bus.MessageID(ctx)
	l.txs[id] = append(l.txs[id], fmt.Sprintf("%p", unitofwork.Tx(ctx).Statement.ConnPool))
}

// distinct returns the number of transactions the first attempts of ids ran in.
func (l *batchLog) distinct(ids []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, id := range ids {
		if len(l.txs[id]) > 0 {
			seen[l.txs[id][0]] = true
		}
	}
	return len(seen)
}

func (l *batchLog) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, txs := range l.txs {
		n += len(txs)
	}
	return n
}

// checkBatchFailingMessage: eight commands wait before the endpoint runs,
// and the first handled takes its time, so they are handled at the same
// time; the fourth fails once after its
// write. The others commit once, in one or two transactions; the failing
// one rolls back to its savepoint alone (its write is gone) and is retried
// alone.
func checkBatchFailingMessage(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	var log batchLog
	var failed, slow sync.Once
	failing := testenv.Name("batch-fail-")
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		log.add(ctx)
		// The first takes its time, so the others, delivered meanwhile,
		// join its batch (a batch commits at once when messages come one
		// at a time).
		slow.Do(func() { time.Sleep(300 * time.Millisecond) })
		if err := record[ConfCmd](c, "cmd")(ctx, m); err != nil {
			return err
		}
		var err error
		if bus.MessageID(ctx) == failing {
			failed.Do(func() { err = errors.New("fails once, after its write") })
		}
		return err
	}, bus.WithInbox(), bus.WithBatch(8, time.Second)))
	var ids []string
	want := map[string]int{}
	for i := range 8 {
		id := testenv.Name("batch-")
		if i == 3 {
			id = failing
		}
		ids = append(ids, id)
		want["cmd "+id] = 1
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: i}, bus.WithMessageID(id)))
	}
	run(t, b)
	settled(t, b, "conf.Cmd", 8)
	require.Equal(t, want, effects(t, c), "each message applied once; the failed attempt's write rolled back alone")
	require.Equal(t, 9, log.calls(), "only the failing message ran again")
	require.EqualValues(t, 8, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.LessOrEqual(t, log.distinct(ids), 2, "messages waiting together share a transaction")
	require.Len(t, log.txs[failing], 2)
}

// checkBatchDuplicates: one message is handled; then it arrives again with
// two copies of a second and three of a third, handled at the same time.
// Each is applied once, the four duplicates are skipped and counted, in
// the process and on their inbox rows.
func checkBatchDuplicates(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	var log batchLog
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		log.add(ctx)
		return record[ConfCmd](c, "cmd")(ctx, m)
	}, bus.WithInbox(), bus.WithBatch(8, 500*time.Millisecond)))
	run(t, b)
	a, x, y := testenv.Name("dup-a-"), testenv.Name("dup-b-"), testenv.Name("dup-c-")
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(a)))
	settled(t, b, "conf.Cmd", 1)
	for _, id := range []string{a, x, y, x, y, y} {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
	}
	settled(t, b, "conf.Cmd", 7)
	require.Equal(t, map[string]int{"cmd " + a: 1, "cmd " + x: 1, "cmd " + y: 1}, effects(t, c))
	require.Equal(t, 3, log.calls(), "the handler never saw a duplicate")
	require.EqualValues(t, 3, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 4, b.Counters().Get("conf.Cmd", metrics.Duplicate))
	duplicatesCounted(t, c, b, 4)
}

// checkBatchStale: versions of one entity arrive out of order, handled at
// the same time: only those newer than every one applied before them are
// applied, and the newest is the last.
func checkBatchStale(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	var mu sync.Mutex
	var applied []string
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfChanged) error {
		mu.Lock()
		applied = append(applied, bus.MessageID(ctx))
		mu.Unlock()
		return record[ConfChanged](c, "changed")(ctx, m)
	}, bus.WithInbox(), bus.WithStale(), bus.WithBatch(8, 500*time.Millisecond)))
	entity := testenv.Name("e-")
	at := time.Now().Add(-time.Hour)
	ids := map[int]string{}
	for _, v := range []int{3, 1, 2, 5, 4} {
		ids[v] = testenv.Name(fmt.Sprintf("v%d-", v))
		require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{Entity: entity}, bus.WithMessageID(ids[v]),
			bus.WithVersion(entity, at.Add(time.Duration(v)*time.Second))))
	}
	run(t, b)
	settled(t, b, "conf.Changed", 5)
	rows := effects(t, c)
	require.Equal(t, 1, rows["changed "+ids[5]], "the newest version is applied")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, ids[5], applied[len(applied)-1], "and applied last")
	require.EqualValues(t, len(applied), b.Counters().Get("conf.Changed", metrics.Handled))
	require.EqualValues(t, 5-len(applied), b.Counters().Get("conf.Changed", metrics.Stale))
	require.Len(t, rows, len(applied), "a stale update left no write")
}

// duplicatesCounted waits until the inbox rows of b's conf.Cmd handler
// count n duplicates. The process counts a duplicate when it skips it; its
// row, when the batch commits.
func duplicatesCounted(t *testing.T, c *confCase, b *bus.Bus, n int64) {
	t.Helper()
	waitFor(t, "each duplicate counted on its key's row", func() bool {
		var counted int64
		require.NoError(t, c.db.Raw("SELECT COALESCE(SUM(duplicates), 0) FROM postroom_inbox WHERE consumer = ?", b.Endpoint()+"/conf.Cmd").Scan(&counted).Error)
		return counted == n
	})
}

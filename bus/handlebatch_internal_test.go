package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/middleware/inbox"
)

type batchMsg struct{ Name string }

// addInTurn adds each member to col from a goroutine of its own, 50 ms
// apart, so that they join the batch in this order, and waits for them.
func addInTurn(col *uow.Collector, members ...*batchMember[batchMsg]) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() { _ = col.Add(context.Background(), m) })
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
}

func newBatchMember(name, id string, c inbox.Claim) *batchMember[batchMsg] {
	return &batchMember[batchMsg]{m: &batchMsg{name}, msg: message.NewMessage(id, nil), claim: c}
}

// TestBatchCopyWithAnotherType: two deliveries with one inbox key in one
// batch, the first with the message-type header and the resend without it
// (decode accepts both), are copies of one key: the first fails, so the
// resend is handled alone, not acked as the duplicate of a message that
// committed nothing.
func TestBatchCopyWithAnotherType(t *testing.T) {
	db := testenv.SQLite(t)
	claimer, err := inbox.NewBatch(inbox.Config{DB: db, Consumer: "test/h"})
	require.NoError(t, err)
	r := batchRun[batchMsg]{claimer: claimer, log: slog.Default(), fn: func(ctx context.Context, ms []*batchMsg) error {
		for _, m := range ms {
			if m.Name == "first" {
				return errors.New("first is malformed")
			}
		}
		return nil
	}}
	col, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 2, BatchWait: time.Minute}, r.run)
	require.NoError(t, err)
	key := inbox.Key{MessageID: "interchange-42"}
	first := newBatchMember("first", "m1", inbox.Claim{Consumer: "test/h", Key: key, Type: "test.Msg"})
	resend := newBatchMember("resend", "m2", inbox.Claim{Consumer: "test/h", Key: key})
	addInTurn(col, first, resend)
	var n int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox WHERE message_id = 'interchange-42'").Scan(&n).Error)
	require.Error(t, first.item.Err)
	require.NoError(t, resend.item.Err)
	require.False(t, resend.dup, "the resend was skipped as the duplicate of a message that failed")
	require.EqualValues(t, 1, n, "the resend's key committed")
}

// TestBatchHandlerSeesArrivalOrder: keys are claimed in key order, but the
// handler gets its messages in the order they arrived, the first of them
// the one whose correlation what it sends carries.
func TestBatchHandlerSeesArrivalOrder(t *testing.T) {
	db := testenv.SQLite(t)
	claimer, err := inbox.NewBatch(inbox.Config{DB: db, Consumer: "test/h"})
	require.NoError(t, err)
	var seen []string
	r := batchRun[batchMsg]{claimer: claimer, log: slog.Default(), fn: func(ctx context.Context, ms []*batchMsg) error {
		for _, m := range ms {
			seen = append(seen, m.Name)
		}
		return nil
	}}
	col, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 3, BatchWait: time.Minute}, r.run)
	require.NoError(t, err)
	claim := func(id string) inbox.Claim { return inbox.Claim{Consumer: "test/h", Key: inbox.Key{MessageID: id}} }
	addInTurn(col, newBatchMember("c", "m3", claim("k3")), newBatchMember("a", "m1", claim("k1")), newBatchMember("b", "m2", claim("k2")))
	require.Equal(t, []string{"c", "a", "b"}, seen)
}

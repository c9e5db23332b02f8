package bus

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

type leaseTest struct{ N int }

func (leaseTest) MessageName() string { return "test.LeaseTest" }

// TestAClaimedRetryRunsOnlyWhileItsLeaseHolds: an instance runs the
// delayed retries it claimed one after another; one whose lease ran out
// meanwhile, and which another instance claimed, is not run here again.
// Before, the whole batch shared one lease from the claim, and a retry
// late in a slow batch ran on two instances, each run sending the message
// on to its next retry or the error topic (found by a review).
func TestAClaimedRetryRunsOnlyWhileItsLeaseHolds(t *testing.T) {
	db := testenv.SQLite(t)
	b, err := New(Config{Endpoint: "ep", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	var runs atomic.Int32
	require.NoError(t, Handle(b, func(context.Context, *leaseTest) error { runs.Add(1); return nil }))
	d, stmts, err := b.delayedStatements(db)
	require.NoError(t, err)
	group := b.group("test.LeaseTest")
	claimed := time.Now().Add(time.Minute)
	insert := func(id string) delayedRow {
		metadata := `{"postroom-message-type":"test.LeaseTest","postroom-message-id":"` + id + `"}`
		require.NoError(t, db.Exec(stmts.Insert, d.Time(claimed), "test.LeaseTest", group, id, []byte(`{"N":1}`), metadata, d.Time(time.Now())).Error)
		r := delayedRow{Topic: "test.LeaseTest", TargetGroup: group, MessageID: id, Payload: []byte(`{"N":1}`), Metadata: metadata}
		require.NoError(t, db.Raw("SELECT id FROM postroom_delayed WHERE message_id = ?", id).Scan(&r.ID).Error)
		return r
	}
	ctx := context.Background()

	lost := insert("lost")
	require.NoError(t, db.Exec(stmts.Claim, d.Time(claimed.Add(time.Hour)), lost.ID).Error) // another instance's lease
	require.NoError(t, b.runClaimed(ctx, d, stmts, lost, claimed))
	require.Zero(t, runs.Load(), "a retry another instance holds ran here too")
	var left int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE id = ?", lost.ID).Scan(&left).Error)
	require.EqualValues(t, 1, left, "the other instance's retry was deleted")

	held := insert("held")
	require.NoError(t, b.runClaimed(ctx, d, stmts, held, claimed))
	require.EqualValues(t, 1, runs.Load(), "a retry still held did not run")
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE id = ?", held.ID).Scan(&left).Error)
	require.Zero(t, left, "a retry that ran was not deleted")
}

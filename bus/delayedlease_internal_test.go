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
// With one lease for the whole batch from the claim, a retry late in a
// slow batch runs on two instances, each run sending the message on to
// its next retry or the error topic.
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

// TestAStopLetsADelayedRetryFinishAndReleasesTheRest: a stop lets the
// delayed retry that is running finish within StopTimeout, as a delivery
// from the broker, and makes the retries it claimed and did not begin due
// at once for the next instance or start. A stop that cancels the running
// retry at once leaves every claimed row waiting for its lease, about 6
// minutes, without a line for those not begun; and Close must not return
// while the retry runs, closing the transport under it.
func TestAStopLetsADelayedRetryFinishAndReleasesTheRest(t *testing.T) {
	for _, byClose := range []bool{false, true} {
		t.Run(map[bool]string{false: "Run's context", true: "Close"}[byClose], func(t *testing.T) {
			db := testenv.SQLite(t)
			b, err := New(Config{Endpoint: "ep", Transport: gochannel.New(gochannel.Config{}), DB: db,
				Logger: slog.New(slog.DiscardHandler), StopTimeout: 10 * time.Second, DelayedPollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			started := make(chan struct{}, 3)
			var finished, cancelled atomic.Int32
			require.NoError(t, Handle(b, func(ctx context.Context, _ *leaseTest) error {
				started <- struct{}{}
				time.Sleep(300 * time.Millisecond)
				if ctx.Err() != nil {
					cancelled.Add(1)
					return ctx.Err()
				}
				finished.Add(1)
				return nil
			}))
			d, stmts, err := b.delayedStatements(db)
			require.NoError(t, err)
			group := b.group("test.LeaseTest")
			for _, id := range []string{"r1", "r2", "r3"} {
				metadata := `{"postroom-message-type":"test.LeaseTest","postroom-message-id":"` + id + `"}`
				require.NoError(t, db.Exec(stmts.Insert, d.Time(time.Now().Add(-time.Second)), "test.LeaseTest", group, id, []byte(`{"N":1}`), metadata, d.Time(time.Now())).Error)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			<-started
			if byClose {
				require.NoError(t, b.Close()) // returns once the retry finished, not at once
				require.EqualValues(t, 1, finished.Load(), "Close returned while the retry ran")
			}
			stop()
			require.NoError(t, <-done)
			require.EqualValues(t, 1, finished.Load(), "the running retry finished")
			require.Zero(t, cancelled.Load(), "the running retry was cancelled by the stop")
			var left, dueNow int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed").Scan(&left).Error)
			require.EqualValues(t, 2, left, "the finished retry's row is deleted, the two not begun stay")
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE due_at <= ?", d.Time(time.Now().Add(10*time.Second))).Scan(&dueNow).Error)
			require.EqualValues(t, 2, dueNow, "due now, not at the end of a lease")
		})
	}
}

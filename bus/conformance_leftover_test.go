package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// checkLeftoverClaims: a handler that ran with Inbox.ExternalEffects before and
// runs the plain inbox now, under the same name, finds the keys its claims
// left. A released key (the effect did not happen) is handled, a done one
// is a duplicate, a parked one (outcome unknown) and one an attempt still
// holds go to the error topic with the reason. A plain inbox that acks
// all four as duplicates never applies the released and parked messages.
// For each handler shape: one message per transaction, WithBatch, and
// HandleBatch.
func checkLeftoverClaims(t *testing.T, c *confCase) {
	d, err := dialects.Of(c.db)
	require.NoError(t, err)
	record := func(ctx context.Context, shape string) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO "+c.effects+" (consumer, id) VALUES (?, ?)", shape, bus.MessageID(ctx)).Error
	}
	shapes := map[string]func(b *bus.Bus) error{
		"handle": func(b *bus.Bus) error {
			return bus.Handle(b, func(ctx context.Context, _ *ConfCmd) error { return record(ctx, "handle") }, bus.WithInbox())
		},
		"withbatch": func(b *bus.Bus) error {
			return bus.Handle(b, func(ctx context.Context, _ *ConfCmd) error { return record(ctx, "withbatch") },
				bus.WithInbox(), bus.WithBatch(4, 200*time.Millisecond))
		},
		"handlebatch": func(b *bus.Bus) error {
			return bus.HandleBatch(b, func(ctx context.Context, ms []*ConfCmd) error {
				for _, id := range bus.MessageIDs(ctx) {
					if err := unitofwork.Tx(ctx).Exec("INSERT INTO "+c.effects+" (consumer, id) VALUES (?, ?)", "handlebatch", id).Error; err != nil {
						return err
					}
				}
				return nil
			}, bus.WithInbox(), bus.WithBatch(4, 200*time.Millisecond))
		},
	}
	for shape, register := range shapes {
		t.Run(shape, func(t *testing.T) {
			c := &confCase{store: c.store, transport: c.transport, db: c.db, tr: c.tr, effects: c.effects,
				errorTopic: testenv.Name("error_")} // on the SQL transport a topic is a log: one per shape
			errs := errorQueue(t, c)
			b := newConfBus(t, c, nil)
			require.NoError(t, register(b))
			consumer := b.Endpoint() + "/conf.Cmd"
			old := time.Now().Add(-time.Hour)
			ids := map[string]string{}
			const expired = "expired" // processing, its lease ran out: its process died mid-call
			for _, status := range []string{dialect.StatusReleased, dialect.StatusDone, dialect.StatusParked, dialect.StatusProcessing, expired} {
				ids[status] = testenv.Name(status + "-")
				lease, stored := time.Now().Add(time.Hour), status // a processing claim is held
				if status == expired {
					lease, stored = old, dialect.StatusProcessing
				}
				require.NoError(t, c.db.Exec(d.ClaimInsert("postroom_inbox"), consumer, b.Endpoint(), ids[status], "conf.Cmd",
					d.Time(old), d.Time(lease), "", nil).Error)
				require.NoError(t, c.db.Exec("UPDATE postroom_inbox SET status = ? WHERE message_id = ?", stored, ids[status]).Error)
				require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(ids[status])))
			}
			run(t, b)
			reasons := map[string]string{}
			for range 3 {
				select {
				case failed := <-errs:
					failed.Ack()
					reasons[failed.UUID] = failed.Metadata.Get(metadata.ErrorReason)
				case <-time.After(20 * time.Second):
					t.Fatalf("the parked, the expired and the held message did not all reach the error topic: %v", reasons)
				}
			}
			require.Contains(t, reasons[ids[dialect.StatusParked]], "outcome unknown")
			require.Contains(t, reasons[ids[expired]], "outcome unknown")
			require.Contains(t, reasons[ids[dialect.StatusProcessing]], "holds the key")
			settled(t, b, "conf.Cmd", 2)
			var parked string
			require.NoError(t, c.db.Raw("SELECT status FROM postroom_inbox WHERE message_id = ?", ids[expired]).Scan(&parked).Error)
			require.Equal(t, dialect.StatusParked, parked, "parked, so that cleanup keeps it until it is resolved")
			require.Equal(t, map[string]int{shape + " " + ids[dialect.StatusReleased]: 1}, effects(t, c))
			require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Handled))
			require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Duplicate))
			var status string
			require.NoError(t, c.db.Raw("SELECT status FROM postroom_inbox WHERE message_id = ?", ids[dialect.StatusReleased]).Scan(&status).Error)
			require.Equal(t, dialect.StatusDone, status)
			require.NoError(t, c.db.Exec("DELETE FROM "+c.effects+" WHERE consumer = ?", shape).Error)
		})
	}
}

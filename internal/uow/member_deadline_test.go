package uow_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
)

// TestAMemberWhoseContextEndsFailsAlone: one member's own context ends
// while its handler runs (a Middleware's timeout): it is rolled back to
// its savepoint alone and the others commit. A rollback run on the
// member's ended context fails at once and breaks the batch: every member
// fails, one whose handler never ran too.
func TestAMemberWhoseContextEndsFailsAlone(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db, cfg := batchesOfThree(t, store.Open)
			mw, err := uow.New(cfg)
			require.NoError(t, err)
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				ctx := msg.Context()
				if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error; err != nil {
					return nil, err
				}
				if msg.UUID == "slow" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			})
			errs := map[string]chan error{}
			for _, id := range []string{"a", "slow", "b"} {
				done := make(chan error, 1)
				errs[id] = done
				time.Sleep(30 * time.Millisecond) // joins in this order
				go func() {
					msg := message.NewMessage(id, nil)
					if id == "slow" {
						ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						defer cancel()
						msg.SetContext(ctx)
					}
					_, err := h(msg)
					done <- err
				}()
			}
			require.NoError(t, <-errs["a"])
			require.ErrorIs(t, <-errs["slow"], context.DeadlineExceeded)
			require.NoError(t, <-errs["b"])
			var ids []string
			require.NoError(t, db.Raw("SELECT id FROM effects ORDER BY id").Scan(&ids).Error)
			require.Equal(t, []string{"a", "b"}, ids, "a and b commit; slow is rolled back alone")
		})
	}
}

// TestAMemberJoiningAfterEveryOtherEndedGetsANewBatch: the only member's
// context ends while its batch waits to fill, which ends the batch's
// transaction; the members that come later get a new batch, not the dead
// one, where they would fail. For WithBatch and for a Collector
// (HandleBatch).
func TestAMemberJoiningAfterEveryOtherEndedGetsANewBatch(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db, cfg := batchesOfThree(t, store.Open)
			mw, err := uow.New(cfg)
			require.NoError(t, err)
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", "m-"+msg.UUID).Error
			})
			c, err := uow.NewCollector(cfg,
				func(ctx context.Context, items []*uow.Collected) error {
					for _, it := range items {
						if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", "c-"+it.Item.(string)).Error; err != nil {
							return err
						}
					}
					return nil
				})
			require.NoError(t, err)
			errs := map[string]chan error{}
			for _, id := range []string{"early", "a", "b"} {
				for _, kind := range []string{"m-", "c-"} {
					done := make(chan error, 1)
					errs[kind+id] = done
					go func() {
						ctx := context.Background()
						if id == "early" {
							var cancel context.CancelFunc
							ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
							defer cancel()
						}
						if kind == "c-" {
							done <- c.Add(ctx, id)
							return
						}
						msg := message.NewMessage(id, nil)
						msg.SetContext(ctx)
						_, err := h(msg)
						done <- err
					}()
				}
				time.Sleep(300 * time.Millisecond)
			}
			for _, id := range []string{"m-a", "m-b", "c-a", "c-b"} {
				require.NoError(t, <-errs[id], id)
			}
			var ids []string
			require.NoError(t, db.Raw("SELECT id FROM effects WHERE id <> 'm-early' AND id <> 'c-early' ORDER BY id").Scan(&ids).Error)
			require.Equal(t, []string{"c-a", "c-b", "m-a", "m-b"}, ids)
		})
	}
}

// TestABatchWhoseMembersAllEndedEndsAtOnce: the only member of a batch
// waiting to fill has run, and its context ends (a stop past its
// StopTimeout): the batch ends then, failing it, instead of waiting out
// BatchWait for members a stopping bus no longer hands out (the member
// would return only when the 5 s wait ran out). For WithBatch and for a
// Collector (HandleBatch).
func TestABatchWhoseMembersAllEndedEndsAtOnce(t *testing.T) {
	_, cfg := batchesOfThree(t, testenv.SQLite)
	mw, err := uow.New(cfg)
	require.NoError(t, err)
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error
	})
	c, err := uow.NewCollector(cfg, func(ctx context.Context, items []*uow.Collected) error {
		return uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", "c").Error
	})
	require.NoError(t, err)
	for _, kind := range []string{"WithBatch", "Collector"} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		if kind == "Collector" {
			err = c.Add(ctx, "c")
		} else {
			msg := message.NewMessage("m", nil)
			msg.SetContext(ctx)
			_, err = h(msg)
		}
		cancel()
		require.Error(t, err, "%s: a batch whose context ended commits nothing", kind)
		require.Less(t, time.Since(start), cfg.BatchWait/2, "%s: the member waited for the batch's wait, not for its own end", kind)
	}
}

// batchesOfThree opens a store with an effects table and returns it with a
// configuration of batches of three that wait 5 s to fill.
func batchesOfThree(t *testing.T, open func(testing.TB) *gorm.DB) (*gorm.DB, uow.Config) {
	t.Helper()
	db := open(t)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	return db, uow.Config{DB: db, BatchSize: 3, BatchWait: 5 * time.Second}
}

package uow_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/uow"
)

// TestAnAloneMessageIsABatchOfItsOwn: a message marked Alone is handled in
// a transaction of its own, and the open batch takes the other messages:
// with a Collector on each store (the calls its batches made), and with
// the batched middleware where transactions run side by side (PostgreSQL,
// MySQL: it commits while the batch waits to fill; SQLite has one
// connection, which the waiting batch holds). Without Alone it joins the
// waiting batch and ends with it.
func TestAnAloneMessageIsABatchOfItsOwn(t *testing.T) {
	stores(t, func(t *testing.T, db *gorm.DB) {
		t.Run("middleware", func(t *testing.T) {
			if db.Dialector.Name() == "sqlite" {
				t.Skip("one connection, which the waiting batch holds: the Collector's calls below show SQLite's batches")
			}
			mw, err := uow.New(uow.Config{DB: db, BatchSize: 4, BatchWait: time.Minute})
			require.NoError(t, err)
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error
			})
			done := make(chan error, 5)
			handle := func(id string, alone bool) {
				msg := message.NewMessage(id, nil)
				if alone {
					msg.SetContext(uow.Alone(msg.Context()))
				}
				_, err := h(msg)
				done <- err
			}
			go handle("a", false)
			go handle("b", false)
			time.Sleep(200 * time.Millisecond) // a and b joined the batch
			go handle("c", true)
			require.NoError(t, within(t, done, 10*time.Second, "the alone message waited for the batch"))
			require.EqualValues(t, 1, countEffects(t, db), "it committed alone")
			go handle("d", false)
			go handle("e", false)
			for range 4 {
				require.NoError(t, within(t, done, 30*time.Second, "the batch did not end when its fourth message joined"))
			}
			require.EqualValues(t, 5, countEffects(t, db))
		})
		t.Run("collector", func(t *testing.T) {
			var mu sync.Mutex
			var calls [][]string
			c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 4, BatchWait: 2 * time.Second}, func(ctx context.Context, items []*uow.Collected) error {
				var ids []string
				for _, it := range items {
					ids = append(ids, it.Item.(string))
				}
				slices.Sort(ids)
				mu.Lock()
				calls = append(calls, ids)
				mu.Unlock()
				return nil
			})
			require.NoError(t, err)
			errs := addAll(c, context.Background(), "a", "b")
			time.Sleep(200 * time.Millisecond) // a and b joined the batch
			alone := addAll(c, uow.Alone(context.Background()), "c")
			require.NoError(t, within(t, alone, 30*time.Second, "the alone item did not end"))
			for range 2 {
				require.NoError(t, within(t, errs, 30*time.Second, "the batch did not end"))
			}
			require.ElementsMatch(t, [][]string{{"c"}, {"a", "b"}}, calls)
		})
	})
}

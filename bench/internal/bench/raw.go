package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rawOp is the SQL one message costs, driven directly through pgx.
type rawOp func(ctx context.Context, pool *pgxpool.Pool, i int64) error

// The same statements the framework executes for one message.
var rawOps = map[Kind]rawOp{
	Plain: func(ctx context.Context, pool *pgxpool.Pool, i int64) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, insertBusiness, uuid.NewString(), i); err != nil {
			return err
		}
		return tx.Commit(ctx)
	},
	Inbox: func(ctx context.Context, pool *pgxpool.Pool, i int64) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		id := uuid.NewString()
		tag, err := tx.Exec(ctx, insertInbox, "bench", "", id, "bench.Work", time.Now().UTC())
		if err != nil || tag.RowsAffected() != 1 {
			return fmt.Errorf("inbox insert: %v", err)
		}
		if _, err := tx.Exec(ctx, insertBusiness, id, i); err != nil {
			return err
		}
		return tx.Commit(ctx)
	},
	InboxStale: func(ctx context.Context, pool *pgxpool.Pool, i int64) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		id := uuid.NewString()
		if _, err := tx.Exec(ctx, insertInbox, "bench", "", id, "bench.Work", time.Now().UTC()); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, upsertWatermark, "bench/raw", "bench.Work", fmt.Sprint(i%entities), time.Now().UnixNano()+i, id, time.Now().UTC())
		if err != nil || tag.RowsAffected() != 1 {
			return fmt.Errorf("watermark upsert: %v", err)
		}
		if _, err := tx.Exec(ctx, insertBusiness, id, i); err != nil {
			return err
		}
		return tx.Commit(ctx)
	},
	Naive: func(ctx context.Context, pool *pgxpool.Pool, i int64) error {
		id := uuid.NewString()
		var n int
		if err := pool.QueryRow(ctx, selectProcessed, id).Scan(&n); err != nil || n > 0 {
			return err
		}
		if _, err := pool.Exec(ctx, insertBusiness, id, i); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, insertProcessed, id)
		return err
	},
}

// runRaw drives op from concurrency goroutines until n messages are done.
func runRaw(ctx context.Context, pool *pgxpool.Pool, op rawOp, concurrency int, n int64) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, concurrency)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				if err := op(ctx, pool, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	return elapsed, <-errs
}

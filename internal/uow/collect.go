package uow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// Collector gathers concurrent items into batches, as the batched
// middleware does messages, and runs each batch once in one transaction. A
// batch ends at Config.BatchSize items, Config.BatchWait after its first,
// or at once while items come one at a time (Config.InFlight).
type Collector struct {
	b *batcher
}

// Collected is one item of a batch, as the function of NewCollector sees it.
type Collected struct {
	Ctx  context.Context // Add's context
	Item any             // Add's item
	// Err is the item's own outcome, set by the batch's function; Add
	// returns it once the transaction has committed.
	Err error
}

// NewCollector returns a collector whose batches run run, with a context
// carrying the batch's unit of work; run sets an item's Err to fail it
// alone. The transaction commits when run returns nil, and rolls back,
// failing every item, when it returns an error or panics.
func NewCollector(cfg Config, run func(ctx context.Context, items []*Collected) error) (*Collector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &batcher{db: cfg.DB, size: max(cfg.BatchSize, 1), wait: cmp.Or(cfg.BatchWait, BatchWaitDefault), inFlight: cfg.InFlight,
		lastSingle: true, collect: run}
	return &Collector{b}, nil
}

// Add hands item to the open batch and, once its transaction has ended,
// returns the batch's error or else the item's Err.
func (c *Collector) Add(ctx context.Context, item any) error {
	it := &Collected{Ctx: ctx, Item: item}
	bt, _ := c.b.joinWith(ctx, it)
	bt.finish()
	<-bt.done
	if bt.err != nil {
		return bt.err
	}
	return it.Err
}

// Settle tells the collector that a message left the handler
// (Config.InFlight dropped): while messages come one at a time, a batch
// every message in flight has joined then ends without waiting BatchWait.
func (c *Collector) Settle() {
	c.b.mu.Lock()
	bt := c.b.closeEagerLocked()
	c.b.mu.Unlock()
	if bt != nil {
		go bt.end()
	}
}

// runCollected runs the batch's function in its transaction, ends it and
// sets bt.err; a panic or runtime.Goexit fails the batch like an error.
func (bt *batch) runCollected() {
	ctx := context.WithValue(bt.tx.ctx, unitKey{}, bt.tx)
	returned := false
	var err error
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unitofwork: batch panicked: %v", r)
		} else if !returned {
			err = errors.New("unitofwork: the batch's function did not return (runtime.Goexit)")
		}
		if err == nil {
			err = bt.tx.brokenErr()
		}
		switch {
		case err != nil || bt.tx.rollbackOnly:
			_ = bt.tx.end(false)
		default:
			if cErr := bt.tx.end(true); cErr != nil {
				err = fmt.Errorf("unitofwork: batch commit: %w", cErr)
			}
		}
		bt.err = err
	}()
	err = bt.b.collect(ctx, bt.items)
	returned = true
}

// breakWith marks u's batch transaction unusable: it rolls back whatever
// the function returns.
func (u *unit) breakWith(err error) {
	for u.parent != nil {
		u = u.parent
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.broken == nil {
		u.broken = err
	}
}

// brokenErr returns what broke the transaction of u, a batch's, or nil.
func (u *unit) brokenErr() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.broken
}

// Savepoint runs f in a savepoint of the unit of work in ctx (f's context
// carries it): when f returns an error, panics or marks RollbackOnly, only
// its writes are rolled back. A savepoint that cannot be rolled back breaks
// the transaction (ErrBatchBroken); on PostgreSQL a swallowed failed
// statement rolls it back too (ErrSavepointAborted).
func Savepoint(ctx context.Context, f func(ctx context.Context) error) (err error) {
	parent, ok := ctx.Value(unitKey{}).(*unit)
	if !ok {
		return ErrNoUnit
	}
	sp := &unit{db: parent.db, ctx: ctx, parent: parent, savepoint: "postroom_sp_" + strconv.FormatUint(savepoints.Add(1), 10)}
	done := false
	defer func() {
		if !done {
			if rbErr := sp.end(false); rbErr != nil {
				err = fmt.Errorf("%w: %w", ErrBatchBroken, withCause(rbErr, err))
			}
		}
		if errors.Is(err, ErrBatchBroken) {
			parent.breakWith(err) // nothing of the transaction commits, whoever ignores err
		}
	}()
	err = f(context.WithValue(ctx, unitKey{}, sp))
	sp.mu.Lock()
	beginErr := sp.err
	sp.mu.Unlock()
	if beginErr != nil {
		return fmt.Errorf("%w: %w", ErrBatchBroken, beginErr)
	}
	if err != nil || sp.rollbackOnly {
		return err
	}
	done = true
	err = sp.end(true)
	if err != nil && !errors.Is(err, ErrSavepointAborted) {
		return fmt.Errorf("%w: %w", ErrBatchBroken, err)
	}
	return err // ErrSavepointAborted: rolled back, f's writes are not kept
}

// savepoints numbers savepoints: names unique in any transaction.
var savepoints atomic.Uint64

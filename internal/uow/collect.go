package uow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// Collector gathers the items handed to it at the same time into batches,
// as the batched middleware does with messages, and runs each batch once,
// in one transaction: the shape of a handler that takes many messages in
// one call. A batch ends when it has Config.BatchSize items, when
// Config.BatchWait has passed since its first, or at once while items come
// one at a time (Config.InFlight).
type Collector struct {
	b *batcher
}

// Collected is one item of a batch, as the function of NewCollector sees it.
type Collected struct {
	// Ctx is the context Add was called with.
	Ctx context.Context
	// Item is what Add was given.
	Item any
	// Err is the item's own outcome, which the batch's function sets: Add
	// returns it once the batch's transaction has committed.
	Err error
}

// NewCollector returns a collector whose batches run run. run gets a
// context carrying the batch's unit of work (Tx, Exec and Savepoint work on
// it) and the batch's items; it sets an item's Err to fail that item alone.
// The transaction commits when run returns nil, and rolls back, failing
// every item with run's error, when it returns one or panics.
func NewCollector(cfg Config, run func(ctx context.Context, items []*Collected) error) (*Collector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &batcher{db: cfg.DB, size: max(cfg.BatchSize, 1), wait: cmp.Or(cfg.BatchWait, BatchWaitDefault), inFlight: cfg.InFlight,
		lastSingle: true, collect: run}
	return &Collector{b}, nil
}

// Add hands item to the open batch and returns, once that batch's
// transaction has ended, the item's error: the batch's when it did not
// commit, else the one its function set.
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

// Settle tells the collector that one of the messages it was given has
// left the handler (Config.InFlight dropped): while messages come one at a
// time, a batch that waited for it ends at once if every message still in
// flight has joined it, instead of waiting Config.BatchWait.
func (c *Collector) Settle() {
	c.b.mu.Lock()
	bt := c.b.closeEagerLocked()
	c.b.mu.Unlock()
	if bt != nil {
		go bt.end()
	}
}

// runCollected runs the batch's function in its transaction, ends the
// transaction and sets bt.err: the transaction commits only when the
// function returned nil and did not mark it RollbackOnly; a panic, or a
// runtime.Goexit, fails the batch like an error.
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

// breakWith marks the transaction of u, a savepoint's or the batch's,
// unusable: the batch rolls back whatever its function returns.
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

// Savepoint runs f in a savepoint of the unit of work in ctx: when f
// returns an error, panics or marks its context RollbackOnly, what it wrote
// is rolled back, and the rest of the transaction is kept. f's context
// carries the savepoint's unit (Tx, Exec, RollbackOnly see it). A
// savepoint that cannot be rolled back leaves the transaction unusable;
// its error then wraps ErrBatchBroken. On PostgreSQL, a statement in f that
// failed without f returning its error rolls the savepoint back too, and
// the error wraps ErrSavepointAborted.
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

package uow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
)

// ErrBatchBroken wraps the error that left a batch's transaction unusable
// (a savepoint not rolled back, a MySQL deadlock): every message is retried.
var ErrBatchBroken = errors.New("unitofwork: the batch's transaction broke; its messages are retried")

// batcher gathers concurrent messages into one transaction per batch. A
// batch closes at size members or wait after its first, and commits once
// each member has run; closed batches commit while the next one fills.
type batcher struct {
	db   *gorm.DB
	size int
	wait time.Duration

	inFlight func() int // Config.InFlight, or nil

	collect func(ctx context.Context, items []*Collected) error // a Collector's, or nil

	mu         sync.Mutex
	open       *batch            // the batch taking members, or nil
	active     int               // batches opened and not yet ended
	holding    map[string]*batch // message ID -> batch not yet ending that holds it
	lastSingle bool              // the last batch to end had one member (true at first)
}

// batch is one transaction shared by its members, each run in turn in a
// savepoint of its own.
type batch struct {
	b    *batcher
	tx   *unit      // the shared transaction, begun at first use
	turn sync.Mutex // held by the member whose statements run

	mu         sync.Mutex // guards the fields below
	joined     int
	finished   int
	closed     bool  // takes no more members
	eager      bool  // commits once every message in flight has joined and run
	committing bool  // the commit started
	broken     error // the transaction is unusable: nothing commits
	timer      *time.Timer

	items []*Collected // a Collector's batch: what its members handed in
	alone bool         // a batch of one member (Alone), out of the batcher's count

	live   int // members whose context is not done; at 0, cancel
	cancel context.CancelFunc
	stops  []func() bool // stop watching the members' contexts

	ids    []string      // the IDs of its WithBatch members, in holding
	ending chan struct{} // closed when it begins to end: its IDs left holding

	done chan struct{} // closed when the transaction ended
	err  error         // how it ended: nil when committed; set before done closes
}

// run handles msg as a member of the open batch and returns once that
// batch's transaction has ended: a message is acked only after its commit.
func (b *batcher) run(msg *message.Message, h message.HandlerFunc) ([]*message.Message, error) {
	if Active(msg.Context()) {
		return h(msg) // joins the unit of work around it
	}
	bt, n := b.join(msg.Context(), msg.UUID, isAlone(msg.Context()))
	m := &unit{db: b.db, parent: bt.tx, savepoint: "postroom_" + strconv.Itoa(n), releaseLater: true}
	out, kept, err := bt.member(msg, h, m)
	<-bt.done
	if err != nil {
		return nil, err
	}
	if bt.err != nil {
		return nil, bt.err // a member skipped as another's duplicate is retried too
	}
	if m.late != nil {
		return nil, m.late // its savepoint could not be released, and was rolled back
	}
	if !kept {
		return nil, nil
	}
	return out, nil
}

// join adds message id to the open batch (see joinLocked). A copy of a
// message held by another, closed batch first waits for that batch to begin
// to end: members claim inbox keys in turn, so two batches holding copies
// in another order would deadlock and retry every member of the victim.
func (b *batcher) join(ctx context.Context, id string, alone bool) (*batch, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id != "" && ctx.Err() == nil {
		other, ok := b.holding[id]
		if !ok || other == b.open {
			break
		}
		b.mu.Unlock()
		select {
		case <-other.ending:
		case <-ctx.Done():
		}
		b.mu.Lock()
	}
	bt, n := b.joinLocked(ctx, nil, alone)
	if _, held := b.holding[id]; id != "" && !held { // a copy that stopped waiting (the bus stops) leaves it to the other
		if b.holding == nil {
			b.holding = map[string]*batch{}
		}
		b.holding[id] = bt
		bt.ids = append(bt.ids, id)
	}
	return bt, n
}

// joinWith adds a member to a Collector's open batch. A Collector's keys
// are claimed in key order, so copies in two batches do not deadlock.
func (b *batcher) joinWith(ctx context.Context, it *Collected) (*batch, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.joinLocked(ctx, it, isAlone(ctx))
}

// joinLocked adds a member to the open batch, opening one if none is, and
// returns it with the member's number; alone, to a batch of its own. Call
// with b.mu held.
func (b *batcher) joinLocked(ctx context.Context, it *Collected, alone bool) (*batch, int) {
	if old := b.open; old != nil && old.tx.ctx.Err() != nil {
		// Every member's context ended, and the transaction's with them.
		old.timer.Stop()
		b.open = nil
		go old.close() // it ends once its members have run
	}
	var bt *batch // alone: a new one
	if !alone {
		bt = b.open
	}
	if bt == nil {
		// Keeps the values of ctx, not its end: it ends when every member's has.
		txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		bt = &batch{b: b, tx: &unit{db: b.db, ctx: txCtx}, cancel: cancel, ending: make(chan struct{}), done: make(chan struct{})}
		// When messages come one at a time (the last batch had one, none is
		// ending), commit once every message in flight has run, not at wait.
		if alone {
			bt.alone, bt.closed = true, true // ends once its member has run
		} else {
			bt.eager = b.inFlight != nil && b.lastSingle && b.active == 0
			b.active++
			b.open = bt
			bt.timer = time.AfterFunc(b.wait, bt.close)
		}
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.joined++
	bt.live++
	bt.stops = append(bt.stops, context.AfterFunc(ctx, bt.memberGone))
	if it != nil {
		bt.items = append(bt.items, it)
	}
	if bt.joined == b.size && !alone {
		bt.closed = true
		b.open = nil
		bt.timer.Stop()
	}
	return bt, bt.joined
}

// memberGone cancels the transaction once every member's context is done,
// and closes the batch rather than hold a stopping bus for BatchWait.
func (bt *batch) memberGone() {
	bt.mu.Lock()
	bt.live--
	gone := bt.live == 0
	bt.mu.Unlock()
	if gone {
		bt.cancel()
		go bt.close()
	}
}

// closeEagerLocked closes and returns the open eager batch once every
// message in flight has joined it and run. Call with b.mu held.
func (b *batcher) closeEagerLocked() *batch {
	bt := b.open
	if bt == nil || !bt.eager {
		return nil
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.finished < bt.joined || bt.joined < b.inFlight() {
		return nil
	}
	b.open = nil
	bt.closed = true
	bt.timer.Stop()
	if !bt.readyLocked() {
		return nil
	}
	return bt
}

// close stops the batch taking members and commits it if all have run.
func (bt *batch) close() {
	bt.b.mu.Lock()
	if bt.b.open == bt {
		bt.b.open = nil
	}
	bt.b.mu.Unlock()
	bt.mu.Lock()
	bt.closed = true
	ready := bt.readyLocked()
	bt.mu.Unlock()
	if ready {
		bt.end()
	}
}

// finish records that a member has run, committing a closed batch after its last.
func (bt *batch) finish() {
	bt.b.mu.Lock()
	bt.mu.Lock()
	bt.finished++
	ready := bt.readyLocked()
	bt.mu.Unlock()
	if !ready && bt.b.open == bt {
		ready = bt.b.closeEagerLocked() == bt
	}
	bt.b.mu.Unlock()
	if ready {
		bt.end()
	}
}

// readyLocked reports, once, that the batch can end. Call with mu held.
func (bt *batch) readyLocked() bool {
	if !bt.closed || bt.finished < bt.joined || bt.committing {
		return false
	}
	bt.committing = true
	return true
}

// end commits the transaction, or rolls it back when it broke.
func (bt *batch) end() {
	defer close(bt.done) // also when a Collector's function calls runtime.Goexit
	defer bt.unwatch()
	bt.mu.Lock()
	broken, members := bt.broken, bt.joined
	bt.mu.Unlock()
	bt.b.mu.Lock()
	if !bt.alone {
		bt.b.active--
		bt.b.lastSingle = members == 1
	}
	for _, id := range bt.ids {
		if bt.b.holding[id] == bt {
			delete(bt.b.holding, id)
		}
	}
	bt.b.mu.Unlock()
	close(bt.ending)
	if bt.b.collect != nil {
		bt.runCollected()
	} else if broken != nil {
		_ = bt.tx.end(false)
		bt.err = broken
	} else if err := bt.tx.releasePending(); err != nil {
		_ = bt.tx.end(false)
		bt.err = fmt.Errorf("%w: %w", ErrBatchBroken, err)
	} else if err := bt.tx.end(true); err != nil {
		bt.err = fmt.Errorf("unitofwork: batch commit: %w", err)
	}
}

// unwatch stops watching the members' contexts once the transaction ended.
func (bt *batch) unwatch() {
	bt.mu.Lock()
	stops := bt.stops
	bt.stops = nil
	bt.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	bt.cancel()
}

// breakWith marks the transaction unusable.
func (bt *batch) breakWith(err error) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.broken == nil {
		bt.broken = fmt.Errorf("%w: %w", ErrBatchBroken, err)
	}
}

// withCause chains a failed rollback's error with its cause (nil after a panic).
func withCause(rbErr, cause error) error {
	if cause == nil {
		return rbErr
	}
	return fmt.Errorf("%w (after: %w)", rbErr, cause)
}

func (bt *batch) brokenErr() error {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.broken
}

// member runs h for msg in its turn, in a savepoint. kept is false when its
// writes were rolled back (an error, or RollbackOnly).
func (bt *batch) member(msg *message.Message, h message.HandlerFunc, m *unit) (out []*message.Message, kept bool, err error) {
	defer bt.finish()
	bt.turn.Lock()
	defer bt.turn.Unlock()
	if err := bt.brokenErr(); err != nil {
		return nil, false, err
	}
	parent := msg.Context()
	m.ctx = parent
	msg.SetContext(context.WithValue(parent, unitKey{}, m))
	done := false
	defer func() {
		msg.SetContext(parent)
		if !done { // on error, rollback-only and panic alike
			if rbErr := m.end(false); rbErr != nil {
				bt.breakWith(withCause(rbErr, err)) // the cause kept: a deadlock's is retried as such
			}
		}
	}()
	out, err = h(msg)
	m.mu.Lock()
	beginErr := m.err
	m.mu.Unlock()
	if beginErr != nil { // BEGIN or the savepoint failed: the transaction is not to be trusted
		bt.breakWith(beginErr)
	}
	if err != nil || m.rollbackOnly {
		return nil, false, err
	}
	done = true
	if err := m.end(true); err != nil {
		if !errors.Is(err, ErrSavepointAborted) { // else rolled back to its savepoint alone
			bt.breakWith(err)
		}
		return nil, false, err
	}
	return out, true, nil
}

// beginSavepoint begins the batch's transaction, then the member's
// savepoint (the same SQL on every supported store). Call with mu held.
func (u *unit) beginSavepoint() (gorm.ConnPool, error) {
	u.parent.mu.Lock()
	conn, err := u.parent.begin()
	prev := u.parent.pending
	u.parent.pending = nil
	u.parent.mu.Unlock()
	if err == nil {
		err = prev.releaseThen(u.parent.ctx, conn, "SAVEPOINT "+u.savepoint)
	}
	if err != nil {
		u.err = err
		return nil, err
	}
	u.conn = conn
	return conn, nil
}

// ErrSavepointAborted wraps the error of a savepoint that could not be
// released on PostgreSQL because the handler swallowed a failed statement's
// error. Its writes are rolled back as if the handler had failed; the rest
// of the batch goes on. (On MySQL a swallowed deadlock breaks the batch:
// ErrBatchBroken.)
var ErrSavepointAborted = errors.New("unitofwork: a statement failed in the handler and its error was not returned")

// endSavepoint ends a batch member's unit: on commit it releases the
// savepoint (which fails if the transaction is no longer whole, see
// ErrSavepointAborted); otherwise it rolls back to it and runs the
// statements AfterRollback queued.
func (u *unit) endSavepoint(conn gorm.ConnPool, commit bool) error {
	// The batch's context, not the member's: a member that timed out is
	// rolled back alone instead of failing the rollback and the batch.
	ctx := u.parent.ctx
	if !commit {
		return u.rollbackTo(ctx, conn)
	}
	if d, err := dialects.Of(u.db); u.releaseLater && err == nil && d.ReleaseWithNext() {
		// Released with the next member's SAVEPOINT, or before the COMMIT,
		// in one round trip (one simple query: pgx without arguments).
		u.parent.mu.Lock()
		u.parent.pending = u
		u.parent.mu.Unlock()
		return nil
	}
	_, err := conn.ExecContext(ctx, "RELEASE SAVEPOINT "+u.savepoint)
	if err == nil {
		return nil
	}
	if rbErr := u.rollbackTo(ctx, conn); rbErr != nil {
		return rbErr
	}
	return fmt.Errorf("%w: %w", ErrSavepointAborted, err)
}

// rollbackTo rolls back to the unit's savepoint and runs the statements
// AfterRollback queued.
func (u *unit) rollbackTo(ctx context.Context, conn gorm.ConnPool) error {
	if _, err := conn.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+u.savepoint); err != nil {
		return fmt.Errorf("unitofwork: rollback to savepoint: %w", err)
	}
	for _, s := range u.after {
		if _, err := conn.ExecContext(ctx, s.query, s.args...); err != nil {
			return fmt.Errorf("unitofwork: after rollback: %w", err)
		}
	}
	return nil
}

// releaseThen releases u's savepoint and runs next (if not empty) in one
// round trip. A savepoint that cannot be released is rolled back and u.late
// says why (its message fails after the commit). An error leaves the
// transaction unusable. u may be nil: next runs alone.
func (u *unit) releaseThen(ctx context.Context, conn gorm.ConnPool, next string) error {
	if u == nil {
		_, err := conn.ExecContext(ctx, next)
		return err
	}
	stmts := "RELEASE SAVEPOINT " + u.savepoint
	if next != "" {
		stmts += "; " + next
	}
	// One simple query without arguments; a prepared pool would prepare it.
	_, relErr := unprepared(conn).ExecContext(ctx, stmts)
	if relErr == nil {
		return nil
	}
	// If the RELEASE ran and next failed, this rollback fails too.
	if err := u.rollbackTo(ctx, conn); err != nil {
		return err
	}
	u.late = fmt.Errorf("%w: %w", ErrSavepointAborted, relErr)
	if next == "" {
		return nil
	}
	_, err := conn.ExecContext(ctx, next)
	return err
}

// releasePending releases the savepoint of the last member whose handler
// returned nil, before the batch commits.
func (u *unit) releasePending() error {
	u.mu.Lock()
	p, conn := u.pending, u.conn
	u.pending = nil
	u.mu.Unlock()
	if p == nil || conn == nil {
		return nil
	}
	return p.releaseThen(u.ctx, conn, "")
}

// unprepared returns the transaction under gorm's prepared-statement pool.
func unprepared(conn gorm.ConnPool) gorm.ConnPool {
	if p, ok := conn.(*gorm.PreparedStmtTX); ok {
		return p.Tx
	}
	return conn
}

// AfterRollback queues query (in the driver's placeholders) to run in the
// batch's transaction once the writes of the message in ctx are rolled
// back, and reports whether it will. Outside a batch it returns false: the
// caller runs it after Run returns.
func AfterRollback(ctx context.Context, query string, args ...any) bool {
	u, ok := ctx.Value(unitKey{}).(*unit)
	if !ok || u.parent == nil {
		return false
	}
	u.after = append(u.after, statement{query, args})
	return true
}

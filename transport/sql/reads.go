package sql

import (
	"context"
	"database/sql"
	"sync"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// reads follows the transactions of one subscription's reading:
// watermill-sql reads a message and records its ack in one transaction, one
// at a time per subscription. Knowing when it ends lets a stopped
// subscription stop once its last ack is committed, instead of waiting
// ackCommitGrace for a read an empty topic never brings.
type reads struct {
	mu   sync.Mutex
	open chan struct{} // closed when the transaction open now ends; nil: none
}

// readsKey holds a subscription's *reads in its reading context, which
// watermill-sql hands to BeginTx.
type readsKey struct{}

// current returns a channel closed when the transaction open now ends
// (closed already when none is open).
func (r *reads) current() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return r.open
}

func (r *reads) begin() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = make(chan struct{})
	return r.open
}

func (r *reads) end(done chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(done)
	if r.open == done {
		r.open = nil
	}
}

// trackedBeginner has transactions begun on a subscription's reading
// context followed by its reads.
type trackedBeginner struct{ wsql.Beginner }

func (b trackedBeginner) BeginTx(ctx context.Context, opts *sql.TxOptions) (wsql.Tx, error) {
	tx, err := b.Beginner.BeginTx(ctx, opts)
	r, ok := ctx.Value(readsKey{}).(*reads)
	if err != nil || !ok {
		return tx, err
	}
	return &trackedTx{Tx: tx, r: r, done: r.begin()}, nil
}

// trackedTx tells its reads when it ends, once.
type trackedTx struct {
	wsql.Tx
	r    *reads
	done chan struct{}
	once sync.Once
}

func (t *trackedTx) Commit() error {
	defer t.ended()
	return t.Tx.Commit()
}

func (t *trackedTx) Rollback() error {
	defer t.ended()
	return t.Tx.Rollback()
}

func (t *trackedTx) ended() { t.once.Do(func() { t.r.end(t.done) }) }

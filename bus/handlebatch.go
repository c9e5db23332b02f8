package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/middleware/inbox"
)

// BatchFunc handles messages of type T together, in one database
// transaction that Tx(ctx) returns. Returning an error rolls back the
// batch; each message is then handled again alone.
type BatchFunc[T any] func(ctx context.Context, ms []*T) error

// batchSizeDefault is HandleBatch's batch size without WithBatch.
const batchSizeDefault = 100

// HandleBatch registers fn for messages of type T, which it takes in
// batches of up to WithBatch's size (100 by default) in one transaction,
// each message acked once it committed. With WithInbox, fn sees only the
// new messages. When fn fails or panics, it is called again with each
// message alone, in a savepoint of its own: fn must have no effects outside
// the transaction, and may see a message twice.
//
// What fn sends carries the correlation and causation of the call's first
// message. MessageIDs(ctx) returns the call's IDs in the order of ms;
// MessageID(ctx) and Metadata(ctx) are the first message's.
//
// Not with WithStale, Inbox.MessageLog or Inbox.ExternalEffects. See
// docs/batching.md, "A batch handler".
func HandleBatch[T any](b *Bus, fn BatchFunc[T], opts ...HandlerOption) error {
	if b == nil || fn == nil {
		return fmt.Errorf("bus: HandleBatch of %s: the bus and the handler function must not be nil", MessageName[T]())
	}
	opts = append([]HandlerOption{WithBatch(batchSizeDefault, 0)}, opts...) // the caller's WithBatch wins
	return b.register(MessageName[T](), false, opts, func(hc handlerConfig) (message.HandlerFunc, error) {
		return batched(b, hc, fn)
	})
}

// batchMember is one message of a batch: decoded, with its inbox key.
type batchMember[T any] struct {
	m     *T
	msg   *message.Message
	in    *incoming
	claim inbox.Claim
	item  *uow.Collected // its place in the batch: Err fails it alone
	pos   int            // the order it joined the batch in
	dup   bool           // skipped: its key was claimed before

	copies []*batchMember[T] // the later messages of its batch with its key
}

// batched returns the handler that hands each message to a batch of fn.
func batched[T any](b *Bus, hc handlerConfig, fn BatchFunc[T]) (message.HandlerFunc, error) {
	switch {
	case b.cfg.DB == nil:
		return nil, fmt.Errorf("bus: handler %s: HandleBatch runs its batches in a transaction: set Config.DB", hc.name)
	case hc.stale:
		return nil, fmt.Errorf("bus: handler %s: HandleBatch and WithStale do not combine: the stale check is per message; use Handle with WithBatch", hc.name)
	case hc.checksum:
		return nil, fmt.Errorf("bus: handler %s: HandleBatch and Inbox.MessageLog do not combine: use Handle with WithBatch", hc.name)
	}
	if err := hc.validateBatch(); err != nil {
		return nil, err
	}
	var claimer *inbox.Batch
	if hc.inbox {
		if err := idempotency.CheckRetention(b.cfg.InboxRetention, b.keyHorizon(hc)); err != nil {
			return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
		}
		var err error
		claimer, err = inbox.NewBatch(inbox.Config{DB: b.cfg.DB, Consumer: b.consumer(hc.name), Key: hc.inboxKey,
			Recorder: namedRecorder{hc.name, b.cfg.Metrics.Recorder}, Logger: b.cfg.Logger, Now: b.cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
		}
	}
	run := batchRun[T]{fn: fn, claimer: claimer, log: b.cfg.Logger, name: hc.name}
	col, err := uow.NewCollector(uow.Config{DB: b.cfg.DB, BatchSize: hc.batchSize, BatchWait: hc.batchWait, InFlight: hc.inFlight}, run.run)
	if err != nil {
		return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	if err := b.keepsKeys(hc); err != nil {
		return nil, err
	}
	hc.onSettle(col.Settle)
	name := MessageName[T]()
	return func(msg *message.Message) ([]*message.Message, error) {
		m, err := decode[T](b, name, msg)
		if err != nil {
			return nil, err
		}
		member := &batchMember[T]{m: m, msg: msg, in: incomingFrom(msg.Context())}
		if claimer != nil {
			if member.claim, err = claimer.KeyOf(msg); err != nil {
				return nil, err
			}
		}
		if err := col.Add(msg.Context(), member); err != nil {
			return nil, err
		}
		if member.dup {
			claimer.Skipped(msg.Context(), member.claim) // once its count committed
		}
		return nil, nil
	}, nil
}

// batchRun runs a batch of fn in the transaction of the context it gets.
type batchRun[T any] struct {
	fn      BatchFunc[T]
	claimer *inbox.Batch // nil without the inbox
	log     *slog.Logger
	name    string // the handler's
}

// run claims the batch's keys and calls fn with the new messages at once;
// when that fails, once per message, each in a savepoint. Its error breaks
// the whole batch.
func (r batchRun[T]) run(ctx context.Context, items []*uow.Collected) error {
	members := make([]*batchMember[T], len(items))
	for i, it := range items {
		members[i] = it.Item.(*batchMember[T])
		members[i].item, members[i].pos = it, i
	}
	if len(members) == 1 {
		// Alone: its failure rolls everything back, no savepoint needed.
		m := members[0]
		dup, err := r.claimAndCall(ctx, m)
		var failed *batchFailed
		switch {
		case errors.As(err, &failed):
			return failed.err
		case err != nil:
			return err
		case dup:
			return r.duplicate(ctx, m)
		}
		m.ran()
		return nil
	}
	members = r.originals(members)
	var fresh, dups []*batchMember[T]
	claimed := false
	err := uow.Savepoint(ctx, func(ctx context.Context) error {
		var err error
		if fresh, dups, err = r.claimAll(ctx, members); err != nil {
			return err
		}
		claimed = true
		return r.call(ctx, inArrival(fresh)) // claimed in key order, handled in arrival order
	})
	for _, m := range dups { // (ranges over those found so far)
		dups = append(dups, m.copies...) // the copies of a duplicate are too
	}
	switch {
	case err == nil:
		tieSends(inArrival(fresh))
		for _, m := range fresh {
			m.ran()
			dups = append(dups, m.copies...)
		}
	case !claimed || !callFailed(err):
		return err // the transaction broke, or the claim failed
	default:
		// Each alone, to retry only the one that fails; then its copies.
		for _, m := range fresh {
			if len(fresh) == 1 {
				m.item.Err = callError(err) // it failed alone
			} else if err := r.alone(ctx, m, &dups); err != nil {
				return err
			}
			for _, c := range m.copies {
				if err := r.alone(ctx, c, &dups); err != nil {
					return err
				}
			}
		}
	}
	slices.SortFunc(dups, byClaim) // counted in the order keys are claimed: no deadlock
	for _, m := range dups {
		if err := r.duplicate(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// duplicate counts m as a duplicate, or fails it alone when its key is an
// unsettled external-effects claim. An error it returns is the transaction's.
func (r batchRun[T]) duplicate(ctx context.Context, m *batchMember[T]) error {
	failed, err := r.claimer.Duplicate(ctx, m.claim)
	if err != nil {
		return err
	}
	if failed != nil {
		m.item.Err = failed
		return nil
	}
	m.dup = true
	return nil
}

// originals sorts members by key, the order keys are claimed in, so that
// two batches with keys in common wait instead of deadlocking, and sets
// the later copies of a key apart on the first message with it: a copy is
// a duplicate once that one commits, else handled alone.
func (r batchRun[T]) originals(members []*batchMember[T]) []*batchMember[T] {
	if r.claimer == nil {
		return members
	}
	slices.SortStableFunc(members, byClaim)
	kept := members[:1]
	for _, m := range members[1:] {
		if first := kept[len(kept)-1]; byClaim(first, m) == 0 { // one key, whatever their types
			first.copies = append(first.copies, m)
			continue
		}
		kept = append(kept, m)
	}
	return kept
}

// inArrival returns ms in the order they joined the batch.
func inArrival[T any](ms []*batchMember[T]) []*batchMember[T] {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b *batchMember[T]) int { return a.pos - b.pos })
	return ms
}

// byClaim orders members by key.
func byClaim[T any](a, b *batchMember[T]) int { return inbox.CompareClaims(a.claim, b.claim) }

// alone claims m's key and calls fn with m alone, in a savepoint: m fails
// alone when fn fails, and joins dups when its key was claimed first. An
// error it returns is the transaction's.
func (r batchRun[T]) alone(ctx context.Context, m *batchMember[T], dups *[]*batchMember[T]) error {
	var dup bool
	err := uow.Savepoint(ctx, func(ctx context.Context) (err error) {
		dup, err = r.claimAndCall(ctx, m)
		return err
	})
	switch {
	case callFailed(err):
		m.item.Err = callError(err)
	case err != nil:
		return err
	case dup:
		*dups = append(*dups, m)
	default:
		m.ran()
	}
	return nil
}

// claimAndCall claims m's key and calls fn with m alone unless it is a dup.
func (r batchRun[T]) claimAndCall(ctx context.Context, m *batchMember[T]) (dup bool, err error) {
	if r.claimer != nil {
		isNew, err := r.claimer.Claim(ctx, m.claim)
		if err != nil || !isNew {
			return err == nil, err
		}
	}
	return false, r.call(ctx, []*batchMember[T]{m})
}

// claimAll claims members' keys, splitting the new from the duplicates.
func (r batchRun[T]) claimAll(ctx context.Context, members []*batchMember[T]) (fresh, dups []*batchMember[T], err error) {
	if r.claimer == nil {
		return members, nil, nil
	}
	claims := make([]inbox.Claim, len(members))
	for i, m := range members {
		claims[i] = m.claim
	}
	isNew, err := r.claimer.ClaimAll(ctx, claims)
	if err != nil {
		return nil, nil, err
	}
	for i, m := range members {
		if isNew[i] {
			fresh = append(fresh, m)
		} else {
			dups = append(dups, m)
		}
	}
	return fresh, dups, nil
}

// batchFailed is fn's error or panic, told apart from the transaction's.
type batchFailed struct{ err error }

func (e *batchFailed) Error() string { return e.err.Error() }

// callFailed reports whether err, from a savepoint around fn, is fn's
// failure, including a failed statement fn ignored (uow.ErrSavepointAborted).
func callFailed(err error) bool {
	var failed *batchFailed
	return errors.As(err, &failed) || errors.Is(err, uow.ErrSavepointAborted)
}

// callError is the error a message fails with when callFailed(err).
func callError(err error) error {
	if failed, ok := errors.AsType[*batchFailed](err); ok {
		return failed.err
	}
	return err
}

// call calls fn with ms, as the first of them (whose sends they are); a
// failure drops what it queued.
func (r batchRun[T]) call(ctx context.Context, ms []*batchMember[T]) (err error) {
	if len(ms) == 0 {
		return nil
	}
	in := ms[0].in
	queued := 0
	if in != nil {
		queued = len(in.outgoing)
		ctx = context.WithValue(ctx, incomingKey{}, in)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, p)
			r.log.Error("bus: batch handler panicked", "handler", r.name, "message_id", ms[0].msg.UUID, "messages", len(ms), "panic", p, "stack", string(debug.Stack()))
		}
		if err != nil {
			if in != nil {
				in.outgoing = in.outgoing[:queued]
			}
			err = &batchFailed{err}
		}
	}()
	values, ids := make([]*T, len(ms)), make([]string, len(ms))
	for i, m := range ms {
		values[i], ids[i] = m.m, m.msg.UUID
	}
	return r.fn(context.WithValue(ctx, batchIDsKey{}, ids), values)
}

// batchIDsKey holds the IDs of the messages of a batch handler's call.
type batchIDsKey struct{}

// ran marks the message handled, for the bus's count.
func (m *batchMember[T]) ran() {
	if m.in != nil {
		m.in.ran = true
	}
}

package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metrics"
)

// leftovers settles, for the transactional inbox, the keys the External
// mode left under the same consumer (see the package doc): taking any row
// as handled would ack an unrun message as a duplicate.
type leftovers struct {
	cfg        Config
	d          dialect.Dialect
	read       string // ClaimReadLocked
	take       string // ClaimTakeReleased, native placeholders
	park       string // ClaimMove
	parkNative string // ClaimMove, native placeholders
}

func newLeftovers(cfg Config, d dialect.Dialect) leftovers {
	return leftovers{cfg: cfg, d: d, read: d.ClaimReadLocked(cfg.Table), take: d.Native(d.ClaimTakeReleased(cfg.Table)),
		park: d.ClaimMove(cfg.Table), parkNative: d.Native(d.ClaimMove(cfg.Table))}
}

// readTaken reads, in the unit of work in ctx, the row a key's insert
// found taken, locking it so MySQL reads it as it is now, not as the
// batch's snapshot saw it. gone: purged in between (the message is retried).
func (l leftovers) readTaken(ctx context.Context, consumer string, key Key) (c claim, gone, err error) {
	c, found, err := readClaim(uow.Tx(ctx), l.d, l.read, consumer, key)
	if err == nil && !found {
		gone = fmt.Errorf("inbox: consumer %s, source %q, message %s: the key's row went away while it was read; retried",
			consumer, key.Source, key.MessageID)
	}
	return c, gone, err
}

// settle decides about c, the taken row of key: fresh when it took a
// released key over (handle it); false, nil for a duplicate; else err.
func (l leftovers) settle(ctx context.Context, consumer string, key Key, c claim, now time.Time) (fresh bool, err error) {
	if c.status != dialect.StatusReleased {
		return false, l.unsettled(c, consumer, key, now)
	}
	taken, err := l.takeReleased(ctx, consumer, key)
	if err == nil && !taken {
		err = changedError(consumer, key)
	}
	return taken, err
}

// takeReleased marks key, if released, done in the unit of work in ctx,
// as the next attempt; it reports whether it did.
func (l leftovers) takeReleased(ctx context.Context, consumer string, key Key) (bool, error) {
	rows, err := uow.Exec(ctx, l.take, l.d.Time(l.cfg.Now()), consumer, key.Source, key.MessageID)
	if err != nil {
		return false, fmt.Errorf("inbox: take released key over: %w", err)
	}
	return rows == 1, nil
}

// unsettled is the error of a message whose key is External claim c; nil
// when done.
func (l leftovers) unsettled(c claim, consumer string, key Key, now time.Time) error {
	switch {
	case c.status == dialect.StatusDone:
		return nil
	case c.status == dialect.StatusReleased:
		return changedError(consumer, key)
	case c.status == dialect.StatusProcessing && now.Before(c.lease):
		return &heldClaimError{Consumer: consumer, Key: key, Until: c.lease}
	}
	return &OutcomeUnknownError{Consumer: consumer, Key: key, Attempts: c.attempts}
}

// expired reports whether c's lease ran out: it is parked, as External
// would have, so cleanup keeps it until resolved.
func (l leftovers) expired(c claim, now time.Time) bool {
	return c.status == dialect.StatusProcessing && !now.Before(c.lease)
}

// parkArgs are the arguments of park for c.
func (l leftovers) parkArgs(c claim, consumer string, key Key) []any {
	return []any{dialect.StatusParked, nil, consumer, key.Source, key.MessageID, c.attempts, dialect.StatusProcessing, dialect.StatusProcessing}
}

// parkAlone parks c in a statement of its own, once the message's
// transaction rolled back.
func (l leftovers) parkAlone(ctx context.Context, p *parkOf) {
	r := l.cfg.DB.WithContext(context.WithoutCancel(ctx)).Exec(l.park, l.parkArgs(p.claim, p.consumer, p.key)...)
	if r.Error != nil {
		l.cfg.Logger.WarnContext(ctx, "inbox: park an expired claim", "consumer", p.consumer, "message_id", p.key.MessageID, "error", r.Error)
		return
	}
	if r.RowsAffected == 1 {
		l.cfg.Recorder.Record(p.consumer, metrics.Parked)
	}
}

// parkOf is an expired claim to park once its transaction ended.
type parkOf struct {
	consumer string
	key      Key
	claim    claim
}

// changedError says that a released key changed while it was taken over.
func changedError(consumer string, key Key) error {
	return fmt.Errorf("inbox: consumer %s, source %q, message %s: the released key changed while it was taken over; retried",
		consumer, key.Source, key.MessageID)
}

// errClaimHeld is the sentinel every [*heldClaimError] matches.
var errClaimHeld = errors.New("inbox: an attempt of the external-effects mode holds the key")

// heldClaimError says that a live External attempt holds a message's key:
// the message is retried.
type heldClaimError struct {
	Consumer string
	Key      Key
	Until    time.Time
}

// Error names the message and the claim's lease.
func (e *heldClaimError) Error() string {
	return fmt.Sprintf("inbox: consumer %s, source %q, message %s: an attempt of the external-effects mode holds the key until %s (the handler ran with Inbox.ExternalEffects before); retried",
		e.Consumer, e.Key.Source, e.Key.MessageID, e.Until.Format(time.RFC3339))
}

// Is makes errors.Is(err, errClaimHeld) true.
func (e *heldClaimError) Is(target error) bool { return target == errClaimHeld }

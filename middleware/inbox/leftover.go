package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// leftovers settles, for the plain (transactional) inbox, the keys a
// handler's claims of the external-effects mode left when the handler ran
// WithExternalEffects before under the same consumer: a released key (the
// effect did not happen) is taken over and handled, a parked one or one
// whose lease ran out (outcome unknown) goes to the error topic, and one an
// attempt still holds is retried. Before, the plain inbox took any row for
// a handled message and acked the message as a duplicate without running
// it (found by a review).
type leftovers struct {
	cfg  Config
	d    dialect.Dialect
	read string // ClaimRead
	take string // ClaimTakeReleased, native placeholders
}

func newLeftovers(cfg Config, d dialect.Dialect) leftovers {
	return leftovers{cfg: cfg, d: d, read: d.ClaimRead(cfg.Table), take: d.Native(d.ClaimTakeReleased(cfg.Table))}
}

// settle decides about key, whose insert in the unit of work in ctx found
// a row: fresh is true when it took a released key over (the message is
// handled); otherwise the message is a duplicate of a done key, whose
// claim it returns (found is false when the row is not visible to the
// transaction), or err says why it is not.
func (l leftovers) settle(ctx context.Context, consumer string, key Key) (fresh bool, c claim, found bool, err error) {
	c, found, err = readClaim(unitofwork.Tx(ctx), l.d, l.read, consumer, key)
	if err != nil || !found {
		return false, c, found, err
	}
	if c.status == dialect.StatusReleased {
		taken, err := l.takeReleased(ctx, consumer, key)
		if err == nil && !taken {
			err = changedError(consumer, key)
		}
		return taken, c, true, err
	}
	return false, c, true, l.unsettled(c, consumer, key)
}

// takeReleased marks key, if released, done in the unit of work in ctx,
// as the next attempt; it reports whether it did.
func (l leftovers) takeReleased(ctx context.Context, consumer string, key Key) (bool, error) {
	rows, err := unitofwork.Exec(ctx, l.take, l.d.Time(l.cfg.Now()), consumer, key.Source, key.MessageID)
	if err != nil {
		return false, fmt.Errorf("inbox: take released key over: %w", err)
	}
	return rows == 1, nil
}

// unsettled is the error of a message whose key is claim c of the
// external-effects mode: nil when it is done.
func (l leftovers) unsettled(c claim, consumer string, key Key) error {
	switch {
	case c.status == dialect.StatusDone:
		return nil
	case c.status == dialect.StatusReleased:
		return changedError(consumer, key)
	case c.status == dialect.StatusProcessing && l.cfg.Now().Before(c.lease):
		return &HeldClaimError{Consumer: consumer, Key: key, Until: c.lease}
	}
	return &OutcomeUnknownError{Consumer: consumer, Key: key, Attempts: c.attempts}
}

// changedError says that a released key changed while it was taken over.
func changedError(consumer string, key Key) error {
	return fmt.Errorf("inbox: consumer %s, source %q, message %s: the released key changed while it was taken over; retried",
		consumer, key.Source, key.MessageID)
}

// HeldClaimError says that an attempt of the external-effects mode holds a
// message's key (the handler ran WithExternalEffects before, on an
// instance still running): the message is retried, and goes to the error
// topic if the claim outlives the retries.
type HeldClaimError struct {
	Consumer string
	Key      Key
	Until    time.Time
}

// Error names the message and the claim's lease.
func (e *HeldClaimError) Error() string {
	return fmt.Sprintf("inbox: consumer %s, source %q, message %s: an attempt of the external-effects mode holds the key until %s (the handler ran WithExternalEffects before); retried",
		e.Consumer, e.Key.Source, e.Key.MessageID, e.Until.Format(time.RFC3339))
}

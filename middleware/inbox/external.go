package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
)

// ErrInsideUnitOfWork is returned when the External mode runs inside a
// unit of work: its claim must commit before the handler runs.
var ErrInsideUnitOfWork = errors.New("inbox: the External mode runs inside a unit of work: put it outside (it opens the handler's own)")

// pollMax bounds the wait between two looks at a claim another delivery
// holds.
const pollMax = time.Second

// external is the External mode: claim (committed), handle, mark done.
type external struct {
	cfg      Config
	d        dialect.Dialect
	insert   string // ClaimInsert
	read     string // ClaimRead
	take     string // ClaimTakeover
	move     string // ClaimMove
	done     string // ClaimMove, native placeholders, for the unit of work
	countDup string
}

func newExternal(cfg Config, d dialect.Dialect) message.HandlerMiddleware {
	x := &external{
		cfg: cfg, d: d,
		insert:   d.ClaimInsert(cfg.Table),
		read:     d.ClaimRead(cfg.Table),
		take:     d.ClaimTakeover(cfg.Table),
		move:     d.ClaimMove(cfg.Table),
		done:     d.Native(d.ClaimMove(cfg.Table)),
		countDup: d.InboxCountDuplicate(cfg.Table),
	}
	return x.middleware
}

// claim is an inbox row as one delivery read it.
type claim struct {
	status   string
	lease    time.Time
	attempts int
	checksum string
}

func (x *external) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if uow.Active(ctx) {
			return nil, ErrInsideUnitOfWork
		}
		consumer, key, err := x.cfg.keyOf(msg)
		if err != nil {
			return nil, err
		}
		sum := ""
		if x.cfg.Checksum {
			sum = checksum(msg.Payload)
		}
		waited := false // said once per delivery, not at each look
		for {
			lease := x.cfg.Now().Add(x.cfg.Lease)
			r := x.cfg.DB.WithContext(ctx).Exec(x.insert, consumer, key.Source, key.MessageID,
				msg.Metadata.Get(metadata.MessageType), x.d.Time(x.cfg.Now()), x.d.Time(lease), sum, x.cfg.payload(msg))
			if r.Error != nil {
				return nil, fmt.Errorf("inbox: claim key: %w", r.Error)
			}
			if r.RowsAffected == 1 {
				return x.run(msg, h, consumer, key, 1, lease)
			}
			c, found, err := x.readClaim(ctx, consumer, key)
			if err != nil {
				return nil, err
			}
			if !found {
				continue // purged or deleted since the insert: claim it anew
			}
			if sum != "" {
				if err := x.cfg.checkReuse(consumer, key, c.checksum, sum); err != nil {
					return nil, err
				}
			}
			switch {
			case c.status == dialect.StatusDone:
				x.cfg.duplicate(ctx, consumer, key)
				x.cfg.countDuplicate(ctx, x.countDup, consumer, key)
				return nil, nil
			case c.status == dialect.StatusParked:
				// This copy goes to the error topic too, unrun.
				return nil, &OutcomeUnknownError{Consumer: consumer, Key: key, Attempts: c.attempts}
			case c.status == dialect.StatusProcessing && x.cfg.Now().Before(c.lease):
				// Wait, not ack: this copy may redeliver an attempt whose
				// process died.
				if !waited {
					waited = true
					x.cfg.Logger.InfoContext(ctx, "inbox: another delivery holds this message's claim on its external effect; waiting until it ends or its lease runs out",
						"consumer", consumer, "message_id", key.MessageID, "attempt", c.attempts, "lease_until", c.lease)
				}
				if err := x.wait(ctx, c.lease); err != nil {
					return nil, err
				}
				continue
			case c.status == dialect.StatusProcessing && x.cfg.OnUnknown == Park:
				parked, err := x.moveClaim(ctx, consumer, key, c.attempts, dialect.StatusParked, nil, dialect.StatusProcessing)
				if err != nil {
					return nil, err
				}
				if !parked {
					continue
				}
				x.cfg.Recorder.Record(consumer, metrics.Parked)
				return nil, &OutcomeUnknownError{Consumer: consumer, Key: key, Attempts: c.attempts}
			}
			// Released, or expired under Retry: take over as the next attempt.
			lease = x.cfg.Now().Add(x.cfg.Lease)
			r = x.cfg.DB.WithContext(ctx).Exec(x.take, x.d.Time(lease), x.d.Time(x.cfg.Now()), consumer, key.Source, key.MessageID, c.status, c.attempts)
			if r.Error != nil {
				return nil, fmt.Errorf("inbox: take claim over: %w", r.Error)
			}
			if r.RowsAffected == 1 {
				if c.status == dialect.StatusProcessing {
					x.cfg.Logger.WarnContext(ctx, "inbox: took over a claim whose lease ran out (its process died, or its attempt outlived Config.Lease): "+
						"running the handler again with the same idempotency key; the external call may have happened before",
						"consumer", consumer, "message_id", key.MessageID, "attempt", c.attempts+1)
				}
				return x.run(msg, h, consumer, key, c.attempts+1, lease)
			}
		}
	}
}

// run runs attempt n of the handler under its claim, in a unit of work that
// marks the key done with the handler's writes.
func (x *external) run(msg *message.Message, h message.HandlerFunc, consumer string, key Key, n int, lease time.Time) (_ []*message.Message, err error) {
	parent := msg.Context()
	ctx, cancel := context.WithDeadline(context.WithValue(parent, idempotencyKey{}, idempotency.Key(consumer, key.Source, key.MessageID)),
		time.Now().Add(lease.Sub(x.cfg.Now())))
	defer cancel()
	msg.SetContext(ctx)
	defer msg.SetContext(parent)
	finished := false
	defer func() {
		if !finished { // a panic, on its way to the router's recoverer
			r := recover()
			_ = x.failed(parent, consumer, key, n, fmt.Errorf("handler panicked: %v", r))
			panic(r)
		}
	}()
	lost, skipped := false, false
	out, err := uow.Run(x.cfg.DB, msg, func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err != nil {
			return nil, err
		}
		ctx := msg.Context()
		if uow.IsRollbackOnly(ctx) {
			skipped = true // by a middleware inside (stale): done all the same
			return out, nil
		}
		rows, err := uow.Exec(ctx, x.done, dialect.StatusDone, nil, consumer, key.Source, key.MessageID, n,
			dialect.StatusProcessing, dialect.StatusParked)
		if err != nil {
			return nil, fmt.Errorf("inbox: mark done: %w", err)
		}
		if rows == 0 {
			lost = true // taken over after the lease ran out: not ours
			uow.RollbackOnly(ctx)
		}
		return out, nil
	})
	finished = true
	switch {
	case err != nil:
		return nil, x.failed(parent, consumer, key, n, err)
	case skipped:
		if _, err := x.moveClaim(parent, consumer, key, n, dialect.StatusDone, nil, dialect.StatusProcessing); err != nil {
			return nil, err
		}
		return out, nil
	case lost:
		x.cfg.Logger.WarnContext(parent, "inbox: claim lost: the attempt outlived its lease and another delivery took over; raise Config.Lease",
			"consumer", consumer, "source", key.Source, "message_id", key.MessageID, "attempt", n)
		return nil, nil
	}
	return out, nil
}

// failed ends an attempt that returned err: NotDone releases the claim;
// any other error leaves the outcome unknown, for the policy.
func (x *external) failed(ctx context.Context, consumer string, key Key, n int, err error) error {
	switch {
	case errors.Is(err, ErrNotDone):
		if _, moveErr := x.moveClaim(ctx, consumer, key, n, dialect.StatusReleased, nil, dialect.StatusProcessing); moveErr != nil {
			return errors.Join(err, moveErr)
		}
		x.cfg.Recorder.Record(consumer, metrics.Released)
		return err
	case x.cfg.OnUnknown == Retry:
		expired := x.d.Time(x.cfg.Now())
		if _, moveErr := x.moveClaim(ctx, consumer, key, n, dialect.StatusProcessing, expired, dialect.StatusProcessing); moveErr != nil {
			return errors.Join(err, moveErr)
		}
		return err
	}
	parked, moveErr := x.moveClaim(ctx, consumer, key, n, dialect.StatusParked, nil, dialect.StatusProcessing)
	if moveErr != nil {
		return errors.Join(err, moveErr)
	}
	if !parked {
		return err
	}
	x.cfg.Recorder.Record(consumer, metrics.Parked)
	return &OutcomeUnknownError{Consumer: consumer, Key: key, Attempts: n, Err: err}
}

// moveClaim moves attempt n's claim to status if it is in from; it reports
// whether it did.
func (x *external) moveClaim(ctx context.Context, consumer string, key Key, n int, status string, lease any, from string) (bool, error) {
	r := x.cfg.DB.WithContext(context.WithoutCancel(ctx)).Exec(x.move, status, lease, consumer, key.Source, key.MessageID, n, from, from)
	if r.Error != nil {
		return false, fmt.Errorf("inbox: set claim %s: %w", status, r.Error)
	}
	return r.RowsAffected == 1, nil
}

func (x *external) readClaim(ctx context.Context, consumer string, key Key) (claim, bool, error) {
	return readClaim(x.cfg.DB.WithContext(ctx), x.d, x.read, consumer, key)
}

// readClaim reads the claim of key with read (ClaimRead) on db; found is
// false when the key has no row.
func readClaim(db *gorm.DB, d dialect.Dialect, read, consumer string, key Key) (c claim, found bool, err error) {
	var lease any
	err = db.Raw(read, consumer, key.Source, key.MessageID).Row().Scan(&c.status, &lease, &c.attempts, &c.checksum)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("inbox: read claim: %w", err)
	}
	if c.lease, err = d.ParseTime(lease); err != nil {
		return c, false, fmt.Errorf("inbox: read claim: %w", err)
	}
	return c, true, nil
}

// wait sleeps until the lease runs out or pollMax, whichever comes first.
func (x *external) wait(ctx context.Context, lease time.Time) error {
	d := min(max(lease.Sub(x.cfg.Now()), time.Millisecond), pollMax, x.cfg.Lease/10+time.Millisecond)
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("inbox: waiting for a claim another delivery holds: %w", ctx.Err())
	}
}

package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
)

// DeliverAt delivers the message at t instead of now: it waits in
// Config.DB (postroom_delayed) until a running bus on the database
// publishes it, with its ID, within about Config.DelayedPollInterval of t.
// Sent from a handler with a transaction, it commits with its writes.
func DeliverAt(t time.Time) SendOption {
	return func(o *sendOptions) { o.at, o.afterSet = t, false }
}

// DeliverAfter is DeliverAt, d after the send (NServiceBus's
// DelayDeliveryWith).
func DeliverAfter(d time.Duration) SendOption {
	return func(o *sendOptions) { o.after, o.afterSet, o.at = d, true, time.Time{} }
}

// delayedPollIntervalDefault is the default Config.DelayedPollInterval.
const delayedPollIntervalDefault = time.Second

// delayedBatch is how many due messages one transaction delivers.
const delayedBatch = 100

// delay stores out for delivery at out.at, in db.
func (b *Bus) delay(ctx context.Context, db *gorm.DB, out outgoing) error {
	if db == nil {
		return fmt.Errorf("bus: deliver %s later: delayed delivery keeps messages in the database: set Config.DB", out.msg.Metadata.Get("postroom-message-type"))
	}
	d, stmts, err := b.delayedStatements(db)
	if err != nil {
		return err
	}
	md, err := json.Marshal(out.msg.Metadata)
	if err != nil {
		return fmt.Errorf("bus: deliver %s later: %w", out.msg.UUID, err)
	}
	group := out.group
	if group == "" {
		group = b.delayedRelay()
	}
	err = db.WithContext(ctx).Exec(stmts.Insert, d.Time(out.at), out.topic, group, out.msg.UUID, []byte(out.msg.Payload), string(md), d.Time(b.cfg.Now())).Error
	if err != nil {
		return fmt.Errorf("bus: deliver %s later: %w (has `postroom migrate` run? delayed delivery needs the table postroom_delayed)", out.msg.UUID, err)
	}
	return nil
}

// delayedRelay is the target_group of the delayed deliveries this bus sends
// and publishes: its transport's reach, or in memory this endpoint's.
func (b *Bus) delayedRelay() string {
	if reach := b.cfg.Transport.Capabilities().Reach; reach != "" {
		return dialect.DelayedByReach(reach)
	}
	return dialect.DelayedByEndpoint(b.cfg.Endpoint)
}

func (b *Bus) delayedStatements(db *gorm.DB) (dialect.Dialect, dialect.DelayedStatements, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, dialect.DelayedStatements{}, fmt.Errorf("bus: %w", err)
	}
	stmts, err := d.Delayed(dialect.DelayedTableDefault)
	return d, stmts, err
}

// relayDelayed delivers due delayed messages until ctx ends.
func (b *Bus) relayDelayed(ctx context.Context) error {
	ticker := time.NewTicker(b.cfg.DelayedPollInterval)
	defer ticker.Stop()
	stranded := &strandedDelayed{said: map[string]time.Time{}}
	for {
		for {
			n, err := b.deliverDue(ctx)
			if err != nil {
				if ctx.Err() == nil {
					b.cfg.Logger.Warn("bus: delivering due delayed messages failed; trying again", "error", err)
				}
				break
			}
			if n < delayedBatch {
				break
			}
		}
		b.reportDelayed(ctx)
		stranded.check(ctx, b)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// reportDelayed sets the delayed table's gauges, if the Recorder keeps them.
func (b *Bus) reportDelayed(ctx context.Context) {
	gauges, ok := b.cfg.Metrics.Recorder.(metrics.GaugeSetter)
	if !ok {
		return
	}
	n, next, err := storeinfo.DelayedSummary(ctx, b.cfg.DB)
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		// The next tick tries again; deliverDue logs the database's failures.
		gauges.SetGauge(metrics.Gauge(metricseries.DelayedMessages), metrics.Unknown)
		gauges.SetGauge(metrics.Gauge(metricseries.DelayedOverdueSeconds), metrics.Unknown)
		return
	}
	overdue := 0.0
	if n > 0 && !next.IsZero() {
		overdue = max(0, b.cfg.Now().Sub(next).Seconds())
	}
	gauges.SetGauge(metrics.Gauge(metricseries.DelayedMessages), float64(n))
	gauges.SetGauge(metrics.Gauge(metricseries.DelayedOverdueSeconds), overdue)
}

type delayedRow struct {
	ID          int64
	Topic       string
	TargetGroup string
	MessageID   string
	Payload     []byte
	Metadata    string
}

// deliverDue publishes and deletes up to delayedBatch due messages in one
// transaction whose row locks keep other instances off; due delayed
// retries of this bus's handlers are claimed in it and run after it.
func (b *Bus) deliverDue(ctx context.Context) (int, error) {
	d, stmts, err := b.delayedStatements(b.cfg.DB)
	if err != nil {
		return 0, err
	}
	// Same reach, no group (older versions), and this bus's handlers.
	groups := []string{"", b.delayedRelay()}
	if !b.isStopping() { // a stop claims no more retries (it would release them at once)
		b.mu.Lock()
		for g := range b.retryTargets {
			groups = append(groups, g)
		}
		b.mu.Unlock()
	}
	var rows, claimed []delayedRow
	var claimedUntil time.Time
	var refused error // the broker refused a message: the ones before it are sent, the rest wait
	err = b.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(stmts.Due, d.Time(b.cfg.Now()), groups, delayedBatch).Scan(&rows).Error; err != nil {
			return err
		}
		// A short claim until each run renews its lease (runClaimed): rows
		// a dead process claimed wait a minute, not a whole lease.
		lease := b.cfg.Now().Add(min(b.retryLease(), delayedClaimLease))
		claimedUntil = lease
		for _, r := range rows {
			if _, send := dialect.DelayedRelay(r.TargetGroup); !send {
				if err := tx.Exec(stmts.Claim, d.Time(lease), r.ID).Error; err != nil {
					return err
				}
				claimed = append(claimed, r)
				continue
			}
			msg := r.message()
			out := outgoing{topic: r.Topic, msg: msg}
			// Bounded, and ended by the stop: the rows stay locked while a
			// broker that never answers holds the publish.
			pubCtx, cancel := context.WithTimeout(ctx, delayedPublishTimeout)
			msg.SetContext(pubCtx)
			err := b.publish(out)
			cancel()
			if err != nil {
				if moveErr := b.delayedRefused(r, out, err); moveErr != nil {
					// Commit what went out; this one and the rest wait for the next tick.
					refused = moveErr
					break
				}
			} else {
				b.delayedSent(r)
			}
			if err := tx.Exec(stmts.Delete, r.ID).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, r := range claimed {
		if err := b.runClaimed(ctx, d, stmts, r, claimedUntil); err != nil {
			// Those not begun are due again at once.
			b.releaseClaimed(ctx, d, stmts, claimed[i+1:], claimedUntil, "claimed and not begun: "+err.Error())
			if errors.Is(err, errStopping) {
				return 0, nil
			}
			return 0, err
		}
	}
	if refused != nil {
		return 0, refused
	}
	return len(rows), nil
}

// delayedClaimLease holds a claimed retry until its run renews the lease.
const delayedClaimLease = time.Minute

// releaseClaimed makes the retries held until then due now, and says so.
func (b *Bus) releaseClaimed(ctx context.Context, d dialect.Dialect, stmts dialect.DelayedStatements, rows []delayedRow, until time.Time, why string) {
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := d.Time(b.cfg.Now())
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		res := b.cfg.DB.WithContext(ctx).Exec(stmts.Renew, now, r.ID, d.Time(until))
		if res.Error != nil {
			b.cfg.Logger.Warn("bus: a delayed retry could not be released; it runs when its lease ends", "message_id", r.MessageID,
				"lease_until", until, "error", res.Error)
			continue
		}
		if res.RowsAffected > 0 { // none: another instance has it since
			ids = append(ids, r.MessageID)
		}
	}
	if len(ids) > 0 {
		b.cfg.Logger.Info("bus: delayed retries released for the next instance or start: "+why, "message_ids", ids)
	}
}

// delayedPublishTimeout bounds one publish of a due delayed message.
const delayedPublishTimeout = 10 * time.Second

// maxDelayedAttempts: publishes of a delayed message before the error topic.
const maxDelayedAttempts = 5

// delayedRefused moves a due message no queue takes, or refused
// maxDelayedAttempts times, to the error topic (nil: delete it), so it
// cannot hold back the others; else the error says to try again later.
func (b *Bus) delayedRefused(r delayedRow, out outgoing, err error) error {
	if errors.Is(err, transport.ErrUnreachable) {
		// An outage, not this message's refusal: not counted.
		return fmt.Errorf("bus: publish delayed message %s (the broker is out of reach): %w", r.MessageID, err)
	}
	b.mu.Lock()
	b.delayedAttempts[r.ID]++
	n := b.delayedAttempts[r.ID]
	b.mu.Unlock()
	if !errors.Is(err, transport.ErrNoRoute) && n < maxDelayedAttempts {
		return fmt.Errorf("bus: publish delayed message %s (attempt %d of %d): %w", r.MessageID, n, maxDelayedAttempts, err)
	}
	if moveErr := b.moveToErrorTopic(MessageName[sendFailed](), out.topic, out.msg, n, err); moveErr != nil {
		return fmt.Errorf("bus: publish delayed message %s: %w (and the error topic refused it: %w)", r.MessageID, err, moveErr)
	}
	b.delayedSent(r)
	return nil
}

// delayedSent forgets the failed attempts of a delayed message gone out.
func (b *Bus) delayedSent(r delayedRow) {
	b.mu.Lock()
	delete(b.delayedAttempts, r.ID)
	b.mu.Unlock()
}

// retryLease is the lease a delayed retry's run takes (runClaimed): its
// retries, the rate limiter's longest wait, and a minute.
func (b *Bus) retryLease() time.Duration {
	lease := b.cfg.Retry.Horizon() + time.Minute
	if !b.cfg.RateLimit.Disabled {
		lease += b.cfg.RateLimit.MaxWait
	}
	return lease
}

// runClaimed renews the lease of a delayed retry claimed until
// claimedUntil and runs it only if this instance still held it: else
// another may have claimed it, and the handler would run twice.
func (b *Bus) runClaimed(ctx context.Context, d dialect.Dialect, stmts dialect.DelayedStatements, r delayedRow, claimedUntil time.Time) error {
	// Held like a broker delivery from before the renew: a stop waits for
	// it, or it sees the stop below and releases the row.
	b.drain.Add()
	defer b.drain.Done()
	if ctx.Err() != nil || b.isStopping() {
		b.releaseClaimed(ctx, d, stmts, []delayedRow{r}, claimedUntil, "claimed and not begun when the bus stopped")
		return errStopping
	}
	db := b.cfg.DB.WithContext(ctx)
	lease := b.cfg.Now().Add(b.retryLease())
	if !lease.After(claimedUntil) {
		// A changed value, always: MySQL counts only changed rows.
		lease = claimedUntil.Add(time.Microsecond)
	}
	renewed, err := dialect.ExecContended(ctx, db, stmts.Renew, d.Time(lease), r.ID, d.Time(claimedUntil))
	if err != nil {
		return fmt.Errorf("bus: renew the lease of delayed retry %s: %w", r.MessageID, err)
	}
	if renewed == 0 {
		b.cfg.Logger.Info("bus: a delayed retry's lease ran out before it ran; another instance has it", "message_id", r.MessageID)
		return nil
	}
	claimed := &claimedRetry{id: r.ID, lease: lease}
	if err := b.runDelayedRetry(context.WithValue(ctx, claimedKey{}, claimed), r, r.message()); err != nil {
		if b.isStopping() && !claimed.rescheduled {
			b.releaseClaimed(ctx, d, stmts, []delayedRow{r}, lease, "cut short by the stop")
			return nil
		}
		b.cfg.Logger.Warn("bus: a delayed retry did not settle; it runs again when its lease ends", "message_id", r.MessageID,
			"lease_until", lease, "error", err)
		return nil
	}
	if claimed.rescheduled { // its row is the next retry now
		return nil
	}
	// Deleted even after a stop; a deadlock with another instance's claim
	// is tried again (ExecContended).
	settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	settled, err := dialect.ExecContended(settleCtx, b.cfg.DB, stmts.Settle, r.ID, d.Time(lease))
	if err != nil {
		b.cfg.Logger.Warn("bus: a delayed retry ran and its row could not be deleted; it runs again when its lease ends (with the inbox, as a duplicate)",
			"message_id", r.MessageID, "lease_until", lease, "error", err)
		return nil
	}
	if settled == 0 {
		b.cfg.Logger.Warn("bus: a delayed retry ran past its lease; another instance may have run it too", "message_id", r.MessageID,
			"lease", b.retryLease())
	}
	return nil
}

// message is the Watermill message of a delayed row.
func (r delayedRow) message() *message.Message {
	msg := message.NewMessage(r.MessageID, r.Payload)
	if err := json.Unmarshal([]byte(r.Metadata), &msg.Metadata); err != nil {
		msg.Metadata = message.Metadata{"postroom-transport-error": "bus: delayed message metadata: " + err.Error()}
	}
	return msg
}

// delayedTableExists reports whether the database has the delayed table
// (one used only for transactions may have none of postroom's schema).
func (b *Bus) delayedTableExists(ctx context.Context) bool {
	_, _, err := storeinfo.DelayedSummary(ctx, b.cfg.DB)
	return err == nil
}

// inTransaction returns the handler's transaction, or nil.
func inTransaction(ctx context.Context) *gorm.DB {
	if uow.Active(ctx) {
		return uow.Tx(ctx)
	}
	return nil
}

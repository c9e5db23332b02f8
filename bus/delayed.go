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
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
)

// DeliverAt delivers the message at t instead of now (NServiceBus's
// DoNotDeliverBefore): it waits in the database (Config.DB, table
// postroom_delayed) and the bus publishes it once due, with
// its ID, so a receiving inbox sees a second delivery as a duplicate. Sent
// from a handler with a transaction, it commits with the handler's
// writes, and is never delivered if they roll back. Any running bus on
// the database delivers it, one instance each message; due messages are
// delivered within about Config.DelayedPollInterval.
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

// delay stores out for delivery at out.at, in db (the handler's
// transaction, or the bus's database).
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

// delayedRelay is the target_group of the delayed deliveries this bus
// sends, and publishes: those of any bus whose transport reaches the same
// subscribers (transport.Capabilities.Reach), or, in memory, those of
// this endpoint: a service on another broker, or with its own in-memory
// transport, would drop another's events as unrouted and send its
// commands to its own error topic.
func (b *Bus) delayedRelay() string {
	if reach := b.cfg.Transport.Capabilities().Reach; reach != "" {
		return dialect.DelayedByReach(reach)
	}
	return dialect.DelayedByEndpoint(b.cfg.Endpoint)
}

func (b *Bus) delayedStatements(db *gorm.DB) (dialect.Dialect, dialect.DelayedStatements, error) {
	d, err := dialect.Of(db)
	if err != nil {
		return "", dialect.DelayedStatements{}, fmt.Errorf("bus: %w", err)
	}
	stmts, err := d.Delayed(dialect.DelayedTableDefault)
	return d, stmts, err
}

// relayDelayed delivers the due delayed messages every
// DelayedPollInterval until ctx ends. It runs when the database has the
// delayed table.
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

// reportDelayed sets the delayed table's gauges, on a Recorder that keeps
// gauges.
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

// deliverDue publishes up to delayedBatch due messages and deletes them, in
// one transaction whose row locks keep other instances off them; a message
// published before a crash is published again (same ID): at least once.
// Due delayed retries of this bus's handlers are claimed in that
// transaction (their due time moves to the end of a lease) and run after
// it, each deleted once it settled.
func (b *Bus) deliverDue(ctx context.Context) (int, error) {
	d, stmts, err := b.delayedStatements(b.cfg.DB)
	if err != nil {
		return 0, err
	}
	// The delayed deliveries sent through a transport of the same reach
	// (and those of older versions, which name none) and the delayed
	// retries of this bus's handlers.
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
		// A claim holds the rows until their turn: each run renews its
		// own lease when it begins (runClaimed). Short, so that the rows
		// a process claimed and never began (it died) wait a minute, not
		// a whole lease.
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
			// The due rows stay locked while it is published: bound the
			// wait for a broker that takes connections and never answers,
			// and let the stop end it: unbounded, such a broker holds the
			// stop, and the rows, through every dial.
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
			// Those not begun are due again at once: a stop, or the
			// database failing (a renew cut off by the stop's cancel).
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

// delayedClaimLease is how long a claim holds a due delayed retry until
// its run begins and renews the lease (at most retryLease).
const delayedClaimLease = time.Minute

// releaseClaimed makes delayed retries this instance holds (their lease
// ends at until) due now, for the next instance or start, and says so.
// Left held at a stop, they would wait until their lease ran out, silently
// for those not begun.
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

// maxDelayedAttempts is how often the delayed relay tries to publish one
// message before it moves it to the error topic (as the outbox's relay,
// outbox.MaxRelayAttemptsDefault).
const maxDelayedAttempts = 5

// delayedRefused handles a due message the transport refused: one no queue
// takes, or one refused maxDelayedAttempts times, goes to the error topic
// (nil: delete it); otherwise, or when the error topic refuses it too (an
// outage), the error says to try again later. Without this, one message
// the broker always refuses (over its size limit) would hold back every
// delayed message of the database and have the ones before it sent again
// at every tick.
func (b *Bus) delayedRefused(r delayedRow, out outgoing, err error) error {
	if errors.Is(err, transport.ErrUnreachable) {
		// The broker could not be reached: an outage, not this message's
		// refusal; not counted, so a heal between its last attempt and the
		// error topic's copy does not move it aside (as the outbox relay).
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

// retryLease is the lease a delayed retry's run takes when it begins
// (runClaimed): its handler's retries, a wait of the rate limiter through
// an outage, and a minute. Another instance runs it once the lease ran
// out. A claim holds a row only delayedClaimLease until then.
func (b *Bus) retryLease() time.Duration {
	lease := b.cfg.Retry.Horizon() + time.Minute
	if !b.cfg.RateLimit.Disabled {
		lease += b.cfg.RateLimit.MaxWait
	}
	return lease
}

// runClaimed runs a delayed retry claimed until claimedUntil with the
// batch. Its lease starts again when it runs (the rows before it in the
// batch took their time), and only while this instance still holds it:
// once it ran out, another instance may have claimed the retry, and
// running it here too would run the handler twice, each run sending the
// message on to its next retry or the error topic.
func (b *Bus) runClaimed(ctx context.Context, d dialect.Dialect, stmts dialect.DelayedStatements, r delayedRow, claimedUntil time.Time) error {
	// Held as a delivery from the broker is, from before its lease is
	// renewed: a stop that begins meanwhile waits for it (Close), or it
	// sees the stop below and releases the row.
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
	// The run may have outlived a stop (Config.StopTimeout): its row is
	// deleted all the same.
	// A deadlock with another instance's claim (as on MariaDB) is tried
	// again: a row not deleted stays, and runs again when its lease ends.
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

// delayedTableExists reports whether the database has the delayed table:
// a database the bus only runs transactions on may have none of
// postroom's schema.
func (b *Bus) delayedTableExists(ctx context.Context) bool {
	_, _, err := storeinfo.DelayedSummary(ctx, b.cfg.DB)
	return err == nil
}

// inTransaction returns the handler's transaction for a delayed message
// sent from it, or nil when it has none.
func inTransaction(ctx context.Context) *gorm.DB {
	if uow.Active(ctx) {
		return uow.Tx(ctx)
	}
	return nil
}

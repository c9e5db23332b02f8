package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
)

// DelayedRetries configures NServiceBus's second level of retries: a
// message whose immediate retries ran out comes back to its handler alone
// after each delay in turn, waiting in the delayed table, and goes to the
// error topic after the last. An unrecoverable error skips them. Off unless
// Delays is set (DelayedRetriesDefault() gives NServiceBus's 10 s, 20 s, 30 s).
type DelayedRetries struct {
	// Delays are the waits before each delayed retry. Defaults to none.
	Delays []time.Duration
}

// DelayedRetriesDefault returns NServiceBus's default delays, 10 s, 20 s
// and 30 s, in a new slice.
func DelayedRetriesDefault() []time.Duration {
	return []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
}

// keyHorizon is how long after its first delivery a message of hc can
// still be handled: the redelivery horizon, and each delayed retry's wait
// with its round of immediate retries and its lease.
func (b *Bus) keyHorizon(hc handlerConfig) time.Duration {
	delays := b.cfg.DelayedRetries.Delays
	if hc.delays != nil {
		delays = *hc.delays
	}
	horizon := b.cfg.RedeliveryHorizon()
	for _, d := range delays {
		horizon += d + b.cfg.Retry.Horizon() + b.retryLease()
	}
	return horizon
}

// retryLater schedules msg's next delayed retry for handler; false: the
// message goes to the error topic instead.
func (b *Bus) retryLater(handler, topic string, msg *message.Message, reason error) (bool, error) {
	b.mu.Lock()
	ready := b.delayedReady
	delays, own := b.retryDelays[handler]
	b.mu.Unlock()
	if !own {
		delays = b.cfg.DelayedRetries.Delays
	}
	done, _ := strconv.Atoi(msg.Metadata.Get(metadata.DelayedRetries))
	if !ready || IsUnrecoverable(reason) || done >= len(delays) {
		return false, nil
	}
	again := msg.Copy()
	delete(again.Metadata, metadata.DeliveryCount)
	delete(again.Metadata, metadata.Redelivered)
	again.Metadata.Set(metadata.DelayedRetries, strconv.Itoa(done+1))
	again.Metadata.Set(metadata.ErrorReason, reason.Error())
	out := outgoing{topic: topic, msg: again, at: b.cfg.Now().Add(delays[done]), group: b.group(handler)}
	if c, ok := msg.Context().Value(claimedKey{}).(*claimedRetry); ok {
		// A delayed retry that failed again: its row becomes the next one.
		if err := b.reschedule(c, out); err != nil {
			return false, err
		}
	} else if err := b.delay(context.Background(), b.cfg.DB, out); err != nil {
		return false, err
	}
	b.cfg.Logger.Warn("bus: message failed its immediate retries; a delayed retry is scheduled", "handler", handler,
		"message_id", msg.UUID, "delayed_retry", done+1, "of", len(delays), "at", out.at, "reason", reason)
	return true, nil
}

// claimedRetry is a delayed retry's row while an instance runs it under
// its lease.
type claimedRetry struct {
	id          int64
	lease       time.Time
	rescheduled bool
}

type claimedKey struct{}

// reschedule turns the claimed row into the next delayed retry out, in one
// statement (an insert and a delete could both survive a crash between
// them), while the lease holds; a lease lost leaves it to the new holder.
func (b *Bus) reschedule(c *claimedRetry, out outgoing) error {
	d, stmts, err := b.delayedStatements(b.cfg.DB)
	if err != nil {
		return err
	}
	md, err := json.Marshal(out.msg.Metadata)
	if err != nil {
		return fmt.Errorf("bus: delayed retry %s: %w", out.msg.UUID, err)
	}
	changed, err := dialect.ExecContended(context.Background(), b.cfg.DB, stmts.Reschedule, d.Time(out.at), string(md), c.id, d.Time(c.lease))
	if err != nil {
		return fmt.Errorf("bus: schedule the next delayed retry of %s: %w", out.msg.UUID, err)
	}
	c.rescheduled = true
	if changed == 0 {
		b.cfg.Logger.Warn("bus: a delayed retry ran past its lease; another instance may have run it too", "message_id", out.msg.UUID,
			"lease", b.retryLease())
	}
	return nil
}

// runDelayedRetry runs a due delayed retry through its handler; an error
// means it did not settle, and its row runs again when its lease ends.
func (b *Bus) runDelayedRetry(ctx context.Context, r delayedRow, msg *message.Message) error {
	b.mu.Lock()
	target := b.retryTargets[r.TargetGroup]
	b.mu.Unlock()
	if target == nil {
		return fmt.Errorf("bus: delayed retry %s: no handler of group %s here", r.MessageID, r.TargetGroup)
	}
	msg.SetContext(ctx)
	// A stop lets it finish within Config.StopTimeout, as a broker delivery
	// (runClaimed counts it in b.drain).
	defer b.outliveStop(msg)()
	return target(r.Topic, msg)
}

// wantsDelayedRetries reports whether any delayed retries are configured.
func (b *Bus) wantsDelayedRetries() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.retryDelays {
		if len(d) > 0 {
			return true
		}
	}
	return len(b.cfg.DelayedRetries.Delays) > 0
}

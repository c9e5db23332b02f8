package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/transport"
)

// sendFailed is the error topic's "handler" of a committed send no queue took.
type sendFailed struct{}

func (sendFailed) MessageName() string { return "postroom.send" }

// ErrPanic wraps a handler's panic.
var ErrPanic = errors.New("bus: handler panicked")

// errStopping marks a delivery given back because the bus is stopping:
// nacked without Watermill's error line.
var errStopping = errors.New("the bus is stopping")

// deliver runs one delivery: attempts with backoff, then the error topic
// (an outage of the database is waited out). It returns an error (a nack)
// only when the error topic refused the message or the bus is stopping.
func (b *Bus) deliver(handler, topic string, msg *message.Message, h message.HandlerFunc, lim *limiter) error {
	b.cfg.Metrics.Recorder.Record(handler, metrics.Received)
	if err := checkReceived(msg); err != nil {
		return b.moveToErrorTopic(handler, topic, msg, 0, err)
	}
	policy := b.cfg.Retry
	var err error
	attempts, retries, contentions := 0, 0, 0
	// outageMark is the handler's last attempt begun at this message's
	// previous transient failure: while none begun since succeeded, the
	// database is out for everyone and waiting spends no retries (for at
	// most RateLimit.MaxWait).
	var outageMark uint64
	var outageSince time.Time
	sawTransient := false
	for {
		// Waiting its turn is not running: a stop gives it back at once.
		release, limited, waitErr := lim.acquire(msg.Context(), b.stopping)
		if errors.Is(waitErr, errStopping) {
			return fmt.Errorf("bus: %s: %w while rate limited (after: %v)", handler, errStopping, err)
		}
		if waitErr != nil {
			return fmt.Errorf("bus: %s: closing while rate limited: %w (after: %v)", handler, waitErr, err)
		}
		attempts++
		var ran bool
		n := lim.begin()
		ran, err = b.attempt(msg, h, handler, attempts)
		release()
		transient := err != nil && !IsUnrecoverable(err) && dialect.Transient(err)
		if !b.cfg.RateLimit.Disabled {
			lim.record(n, err == nil, transient)
		}
		if err == nil {
			if ran {
				b.cfg.Metrics.Recorder.Record(handler, metrics.Handled)
			}
			return nil
		}
		if msg.Context().Err() != nil && b.isStopping() {
			// Most likely the stop ended its context: not the message's fault.
			if errors.Is(err, inbox.ErrOutcomeUnknown) {
				// At warn: an operator has an outcome to find out.
				b.cfg.Logger.Warn("bus: attempt ended by the stop with its outcome unknown: its key is parked; the message goes back to the broker, "+
					"and its next delivery moves it to the error topic", "handler", handler,
					"message_id", msg.UUID, "attempt", attempts, "error", err)
			} else {
				b.cfg.Logger.Info("bus: attempt ended by the stop; the message goes back to the broker", "handler", handler,
					"message_id", msg.UUID, "attempt", attempts, "error", err)
			}
			return fmt.Errorf("bus: %s: %w: %w", handler, errStopping, err)
		}
		// Lost to another transaction (competing WithBatch batches): not the
		// message's fault, so no retry spent, up to maxContentionRetries.
		contended := !transient && !IsUnrecoverable(err) && dialect.Contention(err) && contentions < maxContentionRetries
		level := slog.LevelWarn
		if contended {
			level = slog.LevelInfo
		}
		if limited && transient {
			// The limiter logs the outage's start and end.
			level = slog.LevelDebug
		}
		b.cfg.Logger.Log(context.Background(), level, "bus: attempt failed", "handler", handler, "message_id", msg.UUID, "attempt", attempts,
			"transient", transient, "contended", contended, "rate_limited", limited, "error", err)
		if IsUnrecoverable(err) {
			break
		}
		if contended {
			contentions++
			b.cfg.Metrics.Recorder.Record(handler, metrics.Retried)
			if err := b.pauseRetry(handler, msg, contentionPause(contentions), err); err != nil {
				return err
			}
			continue
		}
		if transient && !sawTransient {
			sawTransient, outageMark, outageSince = true, lim.mark(), b.cfg.Now()
		}
		outage := transient && !lim.succeededSince(outageMark) && b.cfg.Now().Sub(outageSince) < b.cfg.RateLimit.MaxWait
		if transient {
			outageMark = lim.mark() // the next failure looks for a success begun after this one
		}
		if outage && !b.cfg.RateLimit.Disabled && (limited || retries >= policy.MaxRetries) {
			// Wait the outage out without spending (or counting) retries.
			lim.start()
			continue
		}
		if retries >= policy.MaxRetries {
			break
		}
		retries++
		b.cfg.Metrics.Recorder.Record(handler, metrics.Retried)
		if err := b.pauseRetry(handler, msg, policy.backoff(retries), err); err != nil {
			return err
		}
	}
	if later, laterErr := b.retryLater(handler, topic, msg, err); later {
		return nil
	} else if laterErr != nil {
		b.cfg.Logger.Error("bus: could not schedule a delayed retry; the message goes to the error topic", "handler", handler, "message_id", msg.UUID, "error", laterErr)
	}
	return b.moveToErrorTopic(handler, topic, msg, attempts, err)
}

// maxContentionRetries bounds the attempts lost to contention that spend
// no retry.
const maxContentionRetries = 10

// contentionPause is the wait before the nth retry after contention:
// random, so the two do not meet again, and growing (to about 0.5s).
func contentionPause(n int) time.Duration {
	return time.Duration(n) * (10*time.Millisecond + rand.N(40*time.Millisecond))
}

// pauseRetry waits d; a stop or the end of msg's context cuts it short.
func (b *Bus) pauseRetry(handler string, msg *message.Message, d time.Duration, err error) error {
	select {
	case <-time.After(d):
		return nil
	case <-b.stopping: // waiting, not running: given back at once
		return fmt.Errorf("bus: %s: %w during retries: %w", handler, errStopping, err)
	case <-msg.Context().Done():
		if b.isStopping() {
			return fmt.Errorf("bus: %s: %w during retries: %w", handler, errStopping, err)
		}
		return fmt.Errorf("bus: %s: the message's context ended during retries (a deadline of the transport or a Middleware): %w", handler, err)
	}
}

// slowAttempt is how long an attempt runs before the bus says so.
var slowAttempt = time.Minute

// watchSlowAttempt says at warn, once, that an attempt still runs after
// slowAttempt; the caller stops the timer when the attempt ends.
func (b *Bus) watchSlowAttempt(handler, messageID string, attempt int) *time.Timer {
	return time.AfterFunc(slowAttempt, func() {
		b.cfg.Logger.Warn("bus: an attempt is still running after "+slowAttempt.String(), "handler", handler, "message_id", messageID,
			"attempt", attempt, "hint", "a handler waiting for what never comes? On SQLite, a write through Config.DB instead of unitofwork.Tx(ctx) "+
				"waits forever for the connection the handler's own transaction holds")
	})
}

// attempt runs the handler chain once, a panic as an error, then dispatches
// what it sent.
func (b *Bus) attempt(msg *message.Message, h message.HandlerFunc, handler string, n int) (ran bool, err error) {
	parent := msg.Context()
	in := &incoming{msg: msg}
	msg.SetContext(context.WithValue(parent, incomingKey{}, in))
	var slow *time.Timer
	defer func() {
		if slow != nil {
			slow.Stop() // a panic, too
		}
		msg.SetContext(parent)
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, r)
			b.cfg.Logger.Error("bus: handler panicked", "handler", handler, "message_id", msg.UUID, "panic", r, "stack", string(debug.Stack()))
		}
		if in.sends.carriedBy(in) {
			in.sends.finish(err) // whatever happened: the others wait for it
		}
	}()
	slow = b.watchSlowAttempt(handler, msg.UUID, n)
	_, err = h(msg)
	slow.Stop() // the handler's part: the dispatch after it says its own waits
	if err != nil {
		return false, err
	}
	if s := in.sends; s != nil && !s.carriedBy(in) {
		return in.ran, s.wait(msg.Context())
	}
	for i, out := range in.outgoing {
		if err := b.publishCommitted(msg.Context(), out); err != nil {
			b.notDispatched(msg, in.sends, in.outgoing[i:], err)
			return in.ran, err
		}
	}
	return in.ran, nil
}

// notDispatched says at error which messages a committed handler sent
// were not dispatched (with the inbox and no outbox they are lost), and
// for a HandleBatch call every message of the call.
func (b *Bus) notDispatched(msg *message.Message, batch *batchSends, unsent []outgoing, err error) {
	ids := make([]string, len(unsent))
	for i, out := range unsent {
		ids[i] = out.topic + "/" + out.msg.UUID
	}
	attrs := []any{"message_id", msg.UUID, "unsent", strings.Join(ids, ", "), "error", err}
	if batch != nil {
		attrs = append(attrs, "batch_message_ids", strings.Join(batch.ids, ", "))
	}
	b.cfg.Logger.Error("bus: the handler committed, but messages it sent were not dispatched; "+
		"lost unless the handler runs again for a redelivery (with the inbox it does not; Config.Outbox keeps them)", attrs...)
}

// checkReceived refuses what the transport could not read in full, and a
// message without an ID.
func checkReceived(msg *message.Message) error {
	if reason := msg.Metadata.Get(metadata.TransportError); reason != "" {
		return &unrecoverableError{fmt.Errorf("bus: the transport could not read the message: %s", reason)}
	}
	if msg.UUID == "" {
		return &unrecoverableError{errors.New("bus: message ID is empty: a producer must set one (Watermill UUID; on RabbitMQ the message_id property, on the SQL transport the uuid column)")}
	}
	return nil
}

// publishCommitted publishes a message whose handler has committed, trying
// until ctx ends: a rerun handler would not send it again (the inbox skips
// it). A command no queue takes goes to the error topic.
func (b *Bus) publishCommitted(ctx context.Context, out outgoing) error {
	out.msg.SetContext(ctx) // a broker that never answers holds it only as long as the message's context
	if !out.at.IsZero() {
		// A delayed send is a cheap database row: written once the handler
		// committed, whatever becomes of the message's context.
		out.msg.SetContext(context.WithoutCancel(ctx))
	}
	for n := 1; ; n++ {
		err := b.publish(out)
		if err == nil {
			return nil
		}
		if errors.Is(err, transport.ErrNoRoute) {
			moveErr := b.moveToErrorTopic(MessageName[sendFailed](), out.topic, out.msg, n, err)
			if moveErr == nil {
				return nil
			}
			err = moveErr // keep trying: the handler has committed, a retry would not send it again
		}
		b.cfg.Logger.Warn("bus: dispatch after commit failed, retrying", "topic", out.topic, "message_id", out.msg.UUID, "error", err)
		select {
		case <-time.After(b.cfg.Retry.withDefaults().backoff(min(n, 10))):
		case <-ctx.Done():
			return fmt.Errorf("bus: dispatch to %s after commit: %w", out.topic, err)
		}
	}
}

// publishFailed publishes failed to the error topic; refused twice (the
// error metadata may pass RabbitMQ's frame_max), it goes without its
// largest metadata values, which dropped names, rather than loop.
func (b *Bus) publishFailed(publish func(string, ...*message.Message) error, failed *message.Message) (dropped string, err error) {
	if err = publish(b.cfg.ErrorTopic, failed); err == nil {
		return "", nil
	}
	trimmed, dropped := withoutLargestMetadata(failed)
	if dropped == "" {
		return "", err
	}
	if err = publish(b.cfg.ErrorTopic, failed); err == nil {
		return "", nil
	}
	if err2 := publish(b.cfg.ErrorTopic, trimmed); err2 != nil {
		return "", fmt.Errorf("%w; without its largest metadata: %w", err, err2)
	}
	return dropped, nil
}

// Bounds of withoutLargestMetadata: metadata over keptMetadataBytes loses
// its largest values but postroom's own; a reason over keptReasonBytes is cut.
const (
	keptMetadataBytes = 16 << 10
	keptReasonBytes   = 4 << 10
)

// withoutLargestMetadata returns a copy of failed whose metadata fits, and
// what was left out ("" when it fits already: the refusal had another cause).
func withoutLargestMetadata(failed *message.Message) (*message.Message, string) {
	size := 0
	for k, v := range failed.Metadata {
		size += len(k) + len(v)
	}
	if size <= keptMetadataBytes {
		return nil, ""
	}
	out := failed.Copy()
	var parts []string
	if r := out.Metadata.Get(metadata.ErrorReason); len(r) > keptReasonBytes {
		out.Metadata.Set(metadata.ErrorReason, strings.ToValidUTF8(r[:keptReasonBytes], "")+"…")
		size -= len(r) - keptReasonBytes
		parts = append(parts, fmt.Sprintf("%s (cut from %d bytes)", metadata.ErrorReason, len(r)))
	}
	keys := make([]string, 0, len(out.Metadata))
	for k := range out.Metadata {
		if !strings.HasPrefix(k, "postroom-") { // the bus's own: type, version, trace, errors
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(len(out.Metadata[b]), len(out.Metadata[a])) })
	for _, k := range keys {
		if size <= keptMetadataBytes {
			break
		}
		size -= len(k) + len(out.Metadata[k])
		parts = append(parts, fmt.Sprintf("%s (%d bytes)", k, len(out.Metadata[k])))
		delete(out.Metadata, k)
	}
	dropped := strings.Join(parts, ", ")
	out.Metadata.Set(metadata.ErrorDroppedMetadata, dropped)
	return out, dropped
}

// errorTopicRefusedPause is the wait before a nack when the error topic refused.
const errorTopicRefusedPause = time.Second

func (b *Bus) moveToErrorTopic(handler, topic string, msg *message.Message, attempts int, reason error) error {
	failed := msg.Copy()
	for k, v := range failed.Metadata { // a broker may refuse invalid UTF-8
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			delete(failed.Metadata, k)
			failed.Metadata.Set(strings.ToValidUTF8(k, "\uFFFD"), strings.ToValidUTF8(v, "\uFFFD"))
		}
	}
	delete(failed.Metadata, metadata.DeliveryCount) // a replay starts counting again
	delete(failed.Metadata, metadata.Redelivered)
	failed.Metadata.Set(metadata.ErrorReason, strings.ToValidUTF8(reason.Error(), "\uFFFD"))
	failed.Metadata.Set(metadata.ErrorHandler, handler)
	failed.Metadata.Set(metadata.ErrorAttempts, strconv.Itoa(attempts))
	failed.Metadata.Set(metadata.ErrorTopic, topic)
	failed.Metadata.Set(metadata.ErrorGroup, b.group(handler))
	failed.Metadata.Set(metadata.ErrorAt, b.cfg.Now().UTC().Format(time.RFC3339Nano))
	// Mandatory: a message no error queue takes is nacked, not lost.
	publish := b.cfg.Transport.Publisher().Publish
	if m, ok := b.cfg.Transport.(transport.Mandatory); ok {
		publish = m.PublishMandatory
	}
	dropped, err := b.publishFailed(publish, failed)
	if errors.Is(err, transport.ErrNoRoute) {
		// The error queue was deleted while the bus ran: declare it again.
		b.cfg.Logger.Error("bus: the error topic's queue is gone; declaring it again", "error_topic", b.cfg.ErrorTopic, "message_id", msg.UUID)
		b.mu.Lock()
		b.errorQueueDeclared = false
		b.mu.Unlock()
		if derr := b.declareErrorQueue(); derr != nil {
			err = errors.Join(err, derr)
		} else {
			dropped, err = b.publishFailed(publish, failed)
		}
	}
	if err != nil {
		// A nacked message comes back at once: pause, not to loop hot.
		select {
		case <-time.After(errorTopicRefusedPause):
		case <-msg.Context().Done():
		case <-b.stopping:
		}
		return fmt.Errorf("bus: move %s to the error topic: %w (after: %v)", msg.UUID, err, reason)
	}
	if dropped != "" {
		b.cfg.Logger.Warn("bus: the error topic refused the failed message twice with all its metadata; it was moved without the largest values",
			"handler", handler, "message_id", msg.UUID, "dropped", dropped)
	}
	b.cfg.Metrics.Recorder.Record(handler, metrics.Failed)
	failSpan(msg.Context(), reason)
	b.cfg.Logger.Error("bus: message moved to the error topic", "handler", handler, "message_id", msg.UUID,
		"attempts", attempts, "error_topic", b.cfg.ErrorTopic, "reason", reason)
	return nil
}

// failSpan marks the span in ctx failed: the delivery is acked, but to the
// error topic.
func failSpan(ctx context.Context, reason error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("moved to the error topic", trace.WithAttributes(attribute.String("postroom.error.reason", reason.Error())))
	span.SetStatus(codes.Error, reason.Error())
}

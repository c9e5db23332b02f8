// Package amqpqueue reads and moves the messages of one RabbitMQ queue (an
// error queue) for the operator's commands, without a subscriber.
package amqpqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/deliverylimit"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
	postroomamqp "github.com/postroom/postroom/transport/amqp"
)

// Queue reads and moves the messages of one queue (an error queue) for an
// operator, without a subscriber: messages it lists stay where they are.
type Queue struct {
	conn    *amqp091.Connection
	queue   string
	warning string
}

// Open connects to the queue of topic for group. For the error queue
// (group transport.ErrorQueueGroup) it runs the bus's check of its
// delivery limit (see DeliveryLimitWarning).
func Open(url, topic, group string) (*Queue, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("amqpqueue: connect: %w", err)
	}
	q := &Queue{conn: conn, queue: postroomamqp.QueueName(topic, group)}
	if err := q.exists(q.queue); err != nil {
		conn.Close()
		return nil, err
	}
	if group == transport.ErrorQueueGroup {
		if err := q.checkDeliveryLimit(); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return q, nil
}

// DeliveryLimitWarning is deliverylimit.Warning, naming the queue, when
// Open found a quorum error queue without x-delivery-limit, else "".
func (q *Queue) DeliveryLimitWarning() string { return q.warning }

// checkDeliveryLimit runs deliverylimit.Check on a channel of its own (a
// refused declare closes it). A check that fails (no configure
// permission) leaves the queue usable, with a warning.
func (q *Queue) checkDeliveryLimit() error {
	ch, err := q.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpqueue: channel: %w", err)
	}
	defer ch.Close() //nolint:errcheck // a refused declare closed it already
	switch missing, err := deliverylimit.Check(ch, q.queue); {
	case err != nil:
		q.warning = fmt.Sprintf("queue %s: its x-delivery-limit could not be checked (%v): on RabbitMQ 4.0 to 4.2 a quorum error queue "+
			"declared by an earlier postroom without one drops a failed message after 20 looks", q.queue, err)
	case missing:
		q.warning = "queue " + q.queue + ": " + deliverylimit.Warning
	}
	return nil
}

// Close closes the connection.
func (q *Queue) Close() error { return q.conn.Close() }

// Count returns how many messages the queue holds ready now (those a
// Browse in progress holds are not counted).
func (q *Queue) Count() (int, error) {
	ch, err := q.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("amqpqueue: channel: %w", err)
	}
	defer ch.Close()
	state, err := ch.QueueDeclarePassive(q.queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("amqpqueue: queue %s: %w", q.queue, err)
	}
	return state.Messages, nil
}

// exists checks that a queue is declared (a publish to a missing queue
// through the default exchange is dropped without an error).
func (q *Queue) exists(name string) error {
	ch, err := q.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpqueue: channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		if amqpErr, ok := errors.AsType[*amqp091.Error](err); ok && amqpErr.Code == amqp091.NotFound {
			return fmt.Errorf("%w: amqpqueue: queue %s does not exist: %w", ErrNotReplayable, name, err)
		}
		return fmt.Errorf("amqpqueue: check queue %s: %w", name, err)
	}
	return nil
}

// Browse calls visit for up to limit messages, oldest first, among those
// in the queue when it starts. A message visit takes (even with an error)
// is removed at once, before the next is read, so a Browse cut off leaves
// at most one message both sent and perhaps still queued, which it reports
// with [ErrNotRemoved]. The rest are put back when Browse returns.
func (q *Queue) Browse(ctx context.Context, limit int, visit func(*message.Message) (take bool, err error)) error {
	ch, err := q.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpqueue: channel: %w", err)
	}
	defer ch.Close() // requeues every delivery not acked
	state, err := ch.QueueDeclarePassive(q.queue, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpqueue: queue %s: %w", q.queue, err)
	}
	var m postroomamqp.Marshaler
	removing := "" // the message acked last, until a later answer on ch proves the broker had the ack
	settle := func(err error) error {
		if removing == "" {
			return err
		}
		if _, serr := ch.QueueDeclarePassive(q.queue, true, false, false, false, nil); serr != nil {
			err = errors.Join(err, fmt.Errorf("%w: amqpqueue: message %s: its removal was cut off: %w", ErrNotRemoved, removing, serr))
		}
		removing = ""
		return err
	}
	for range min(limit, state.Messages) {
		if err := ctx.Err(); err != nil {
			return settle(err)
		}
		d, ok, err := ch.Get(q.queue, false)
		if err != nil {
			return settle(fmt.Errorf("amqpqueue: get from %s: %w", q.queue, err))
		}
		removing = ""
		if !ok {
			break
		}
		msg, err := m.Unmarshal(d)
		if err != nil {
			return fmt.Errorf("amqpqueue: message %d of %s: %w", d.DeliveryTag, q.queue, err)
		}
		take, err := visit(msg)
		if take {
			if ackErr := d.Ack(false); ackErr != nil {
				return errors.Join(err, fmt.Errorf("%w: amqpqueue: message %s: %w", ErrNotRemoved, msg.UUID, ackErr))
			}
			removing = msg.UUID
		}
		if err != nil {
			return settle(err)
		}
	}
	return settle(nil)
}

// ErrNotRemoved marks the error of a Browse cut off while it removed the
// message visit took: a later retry may send it again.
var ErrNotRemoved = errors.New("taken, but perhaps still in the error topic")

// ErrOutcomeUnknown marks the error of a send whose wait for the confirm
// was cut off: the copy may or may not be queued; the original stays.
var ErrOutcomeUnknown = errors.New("sent or not, unknown")

// SendToQueue publishes msg straight to a queue (through the default
// exchange) with its ID and metadata, and waits for the broker's confirm.
func (q *Queue) SendToQueue(ctx context.Context, queue string, msg *message.Message) error {
	if err := q.exists(queue); err != nil {
		return err
	}
	return q.send(ctx, queue, msg)
}

// send publishes msg to queue, mandatory, and waits for the confirm.
func (q *Queue) send(ctx context.Context, queue string, msg *message.Message) error {
	ch, err := q.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpqueue: channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("amqpqueue: confirm mode: %w", err)
	}
	// A queue deleted since the check returns the message before the confirm.
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	p, err := postroomamqp.Marshaler{}.Marshal(msg)
	if err != nil {
		return err
	}
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		return fmt.Errorf("amqpqueue: publish to %s: %w", queue, err)
	}
	ok, err := confirm.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("%w: amqpqueue: the wait for the confirm of %s to %s was cut off: %w", ErrOutcomeUnknown, msg.UUID, queue, err)
	}
	if !ok && ch.IsClosed() {
		// amqp091 settles a closed channel's confirms as refused.
		return fmt.Errorf("%w: amqpqueue: the channel closed before the confirm of %s to %s", ErrOutcomeUnknown, msg.UUID, queue)
	}
	if !ok {
		return errors.New("amqpqueue: the broker refused the message to " + queue)
	}
	select {
	case r := <-returns:
		return fmt.Errorf("%w: amqpqueue: queue %s is gone: RabbitMQ returned the message (%d %s)", ErrNotReplayable, queue, r.ReplyCode, r.ReplyText)
	default:
		return nil
	}
}

// ErrNotReplayable marks the error of a message that cannot be replayed
// (no handler named, or its queue is gone); the others can be.
var ErrNotReplayable = errors.New("not replayable")

// Replay sends ReplayCopy of msg to its handler's queue and returns it.
func (q *Queue) Replay(ctx context.Context, msg *message.Message) (string, error) {
	topic, group, out, err := ReplayCopy(msg)
	if err != nil {
		return "", err
	}
	queue := postroomamqp.QueueName(topic, group)
	return queue, q.SendToQueue(ctx, queue, out)
}

// ReplayCopy returns what a replay of a failed message sends, on every
// transport: the topic and group its error metadata names, and a copy with
// its ID and metadata, without the error metadata and delayed retries
// count, marked as replayed.
func ReplayCopy(msg *message.Message) (topic, group string, out *message.Message, err error) {
	if msg.UUID == "" {
		// The bus would refuse it at once and bring it back.
		return "", "", nil, fmt.Errorf("%w: amqpqueue: the message has no ID, and no handler takes one without: delete it, and have its producer set one", ErrNotReplayable)
	}
	topic, group = msg.Metadata.Get(metadata.ErrorTopic), msg.Metadata.Get(metadata.ErrorGroup)
	if topic == "" || group == "" {
		var missing []string
		for _, k := range []string{metadata.ErrorTopic, metadata.ErrorGroup} {
			if msg.Metadata.Get(k) == "" {
				missing = append(missing, k)
			}
		}
		return "", "", nil, fmt.Errorf("%w: amqpqueue: message %s has no %s metadata, which names where it goes back to: "+
			"it was moved by a postroom before 2026-12-03 (no %s) or not by postroom; send it to its queue yourself, or delete it",
			ErrNotReplayable, msg.UUID, strings.Join(missing, " or "), metadata.ErrorGroup)
	}
	out = message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		// ErrorDroppedMetadata stays: this is not what the producer sent.
		if (!strings.HasPrefix(k, "postroom-error-") || k == metadata.ErrorDroppedMetadata) && k != metadata.DelayedRetries && k != metadata.TransportError {
			out.Metadata.Set(k, v)
		}
	}
	out.Metadata.Set(metadata.Replayed, cmp.Or(msg.Metadata.Get(metadata.ErrorAt), "unknown"))
	return topic, group, out, nil
}

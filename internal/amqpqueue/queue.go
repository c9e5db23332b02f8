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

	"github.com/postroom/postroom/metadata"
	postroomamqp "github.com/postroom/postroom/transport/amqp"
)

// Queue reads and moves the messages of one queue (an error queue) for an
// operator, without a subscriber: messages it lists stay where they are.
type Queue struct {
	conn  *amqp091.Connection
	queue string
}

// Open connects to the queue of topic for group.
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
	return q, nil
}

// Close closes the connection.
func (q *Queue) Close() error { return q.conn.Close() }

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

// Browse calls visit for up to limit messages of the queue, oldest first,
// among those in the queue when it starts: a message that arrives meanwhile
// (one replayed by visit and moved back by a running endpoint) waits for
// the next Browse. Each message stays in the queue unless visit returns
// take: then it is removed when Browse returns, also after an error. The
// messages left are put back when Browse returns.
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
	var taken []amqp091.Delivery
	var m postroomamqp.Marshaler
	for range min(limit, state.Messages) {
		if err := ctx.Err(); err != nil {
			return errors.Join(err, ack(taken))
		}
		d, ok, err := ch.Get(q.queue, false)
		if err != nil {
			return errors.Join(fmt.Errorf("amqpqueue: get from %s: %w", q.queue, err), ack(taken))
		}
		if !ok {
			break
		}
		msg, err := m.Unmarshal(d)
		if err != nil {
			return errors.Join(fmt.Errorf("amqpqueue: message %d of %s: %w", d.DeliveryTag, q.queue, err), ack(taken))
		}
		take, err := visit(msg)
		if take {
			taken = append(taken, d)
		}
		if err != nil {
			return errors.Join(err, ack(taken))
		}
	}
	return ack(taken)
}

// ack removes what a Browse took, also when it stops on an error: visit
// has done its work on them (a replay sent its copy), and a later Browse
// would do it again.
func ack(taken []amqp091.Delivery) error {
	for _, d := range taken {
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("amqpqueue: remove a message: %w", err)
		}
	}
	return nil
}

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
	// A queue deleted since the check: RabbitMQ returns the mandatory
	// message before it confirms it, and the confirm alone would say ok.
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
		return fmt.Errorf("amqpqueue: confirm of %s: %w", queue, err)
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
// (no error metadata naming its handler, or its handler's queue is gone):
// it stays in the error topic, and the messages after it can be replayed.
var ErrNotReplayable = errors.New("not replayable")

// Replay sends a failed message back to the queue of the handler it came
// from (its error metadata names the topic and the group), with its
// original ID and metadata, without the error metadata and the delayed
// retries count (a new failure records its own), marked as replayed. It
// returns that queue.
func (q *Queue) Replay(ctx context.Context, msg *message.Message) (string, error) {
	topic, group, out, err := ReplayCopy(msg)
	if err != nil {
		return "", err
	}
	queue := postroomamqp.QueueName(topic, group)
	return queue, q.SendToQueue(ctx, queue, out)
}

// ReplayCopy returns what a replay of a failed message sends, on every
// transport: the topic and the handler's group its error metadata names,
// and a copy with its original ID and metadata, without the error
// metadata and the delayed retries count (a new failure records its
// own), marked as replayed.
func ReplayCopy(msg *message.Message) (topic, group string, out *message.Message, err error) {
	topic, group = msg.Metadata.Get(metadata.ErrorTopic), msg.Metadata.Get(metadata.ErrorGroup)
	if topic == "" || group == "" {
		return "", "", nil, fmt.Errorf("%w: amqpqueue: message %s has no %s or %s metadata: it was not moved by a postroom bus that records them", ErrNotReplayable, msg.UUID,
			metadata.ErrorTopic, metadata.ErrorGroup)
	}
	out = message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		// The mark of metadata left out on the way to the error topic stays:
		// the replayed message is not the one its producer sent.
		if (!strings.HasPrefix(k, "postroom-error-") || k == metadata.ErrorDroppedMetadata) && k != metadata.DelayedRetries && k != metadata.TransportError {
			out.Metadata.Set(k, v)
		}
	}
	out.Metadata.Set(metadata.Replayed, cmp.Or(msg.Metadata.Get(metadata.ErrorAt), "unknown"))
	return topic, group, out, nil
}

package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// subscriber wraps watermill-amqp's subscriber of one group: it logs the
// messages marked with metadata.TransportError and the nacks (RabbitMQ
// requeues a nacked message at once), and explains a queue declared with
// other arguments.
type subscriber struct {
	sub    *wamqp.Subscriber
	group  string
	cfg    Config
	log    *logsink.Sink
	record *declaredNames

	closing   chan struct{} // closed by Close: watermill-amqp gives up on what it holds
	closeOnce sync.Once
}

var (
	_ message.Subscriber           = (*subscriber)(nil)
	_ message.SubscribeInitializer = (*subscriber)(nil)
)

// Subscribe consumes topic from the group's queue, declaring and binding it.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.recordDeclared(topic)
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, s.explain(topic, err)
	}
	out := make(chan *message.Message)
	go s.forward(ctx, topic, in, out)
	return out, nil
}

// SubscribeInitialize declares the group's queue for topic and binds it.
func (s *subscriber) SubscribeInitialize(topic string) error {
	s.recordDeclared(topic)
	if err := s.sub.SubscribeInitialize(topic); err != nil {
		return s.explain(topic, err)
	}
	return nil
}

// recordDeclared records the exchange and the queue a subscription to
// topic declares, for Transport.Declared.
func (s *subscriber) recordDeclared(topic string) {
	s.record.exchange(ExchangeName(topic))
	s.record.queue(QueueName(topic, s.group))
}

// Close stops every subscription and closes the connection.
func (s *subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	return s.sub.Close()
}

// forward passes each message on and watches its outcome. watermill-amqp
// hands out one message at a time per subscription and waits for its ack
// or nack, so waiting here adds no delay. It ends, closing out, when in is
// closed or when ctx ends.
//
// watermill-amqp does not close its channel when ctx ends: it may consume
// again first (it picks at random between reconnecting and ctx), and a
// delivery nobody takes blocks it, unacked, until the subscriber closes
// (Watermill's TestSubscribeCtx failed about one run in four). So once ctx
// ends, out is closed, and what in still delivers is nacked, back to the
// queue, until watermill-amqp closes in. A message the handler holds when
// ctx ends is still watched until it is settled or the subscriber closes:
// its nack is logged, also past the delivery limit.
func (s *subscriber) forward(ctx context.Context, topic string, in <-chan *message.Message, out chan<- *message.Message) {
	outClosed := false
	closeOut := func() {
		if !outClosed {
			outClosed = true
			close(out)
		}
	}
	defer func() {
		closeOut()
		for msg := range in {
			msg.Nack()
		}
	}()
	queue := QueueName(topic, s.group)
	for {
		var msg *message.Message
		select {
		case m, ok := <-in:
			if !ok {
				return
			}
			msg = m
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil { // both were ready
			msg.Nack() // not taken: back to the queue
			return
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			msg.Nack()
			return
		case <-msg.Context().Done(): // watermill-amqp gave up on it (Close), or ctx ended
			if ctx.Err() != nil {
				msg.Nack()
				return
			}
			continue
		}
		if reason := msg.Metadata.Get(metadata.TransportError); reason != "" {
			s.log.Logger().Warn("amqp: received a message the transport could not read in full; it goes to the error topic",
				"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
		}
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-s.closing:
		case <-ctx.Done():
			closeOut()
			select {
			case <-msg.Acked():
			case <-msg.Nacked():
			case <-s.closing:
			}
		}
		s.logNack(msg, topic, queue)
	}
}

// logNack logs msg's nack, if it was nacked: at warn (RabbitMQ requeues
// it), or at error past its quorum queue's delivery limit (RabbitMQ drops
// it).
func (s *subscriber) logNack(msg *message.Message, topic, queue string) {
	select {
	case <-msg.Nacked():
	default:
		return
	}
	reason := msg.Metadata.Get(metadata.ErrorReason)
	if reason == "" {
		reason = "not given (a nack carries no reason)"
	}
	if s.atDeliveryLimit(msg) {
		s.log.Logger().Error("amqp: message nacked at its queue's delivery limit; RabbitMQ drops it",
			"message_id", msg.UUID, "topic", topic, "queue", queue, "delivery_limit", s.cfg.DeliveryLimit, "reason", reason)
		return
	}
	s.log.Logger().Warn("amqp: message nacked; RabbitMQ requeues it for immediate redelivery",
		"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
}

// atDeliveryLimit reports whether msg, nacked, has been returned to its
// quorum queue more often than the queue's x-delivery-limit, so that
// RabbitMQ drops it instead of requeueing it. The broker's count
// (x-delivery-count, metadata.DeliveryCount) is of the returns before
// this delivery.
func (s *subscriber) atDeliveryLimit(msg *message.Message) bool {
	if s.cfg.QueueType != QueueQuorum || s.group == transport.ErrorQueueGroup {
		return false
	}
	before, _ := strconv.Atoi(msg.Metadata.Get(metadata.DeliveryCount))
	return before+1 > s.cfg.DeliveryLimit
}

// explain wraps an error of Subscribe or SubscribeInitialize, saying what
// to do when the queue exists with other arguments.
func (s *subscriber) explain(topic string, err error) error {
	queue := QueueName(topic, s.group)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed {
		declared := "QueueType " + string(s.cfg.QueueType)
		if s.cfg.QueueType == QueueQuorum {
			declared += fmt.Sprintf(", DeliveryLimit %d", s.cfg.DeliveryLimit)
		}
		return fmt.Errorf("amqp: queue %s exists with other arguments than this transport declares (%s): "+
			"RabbitMQ does not change an existing queue's type or arguments (a classic queue cannot be redeclared as quorum, nor the reverse); "+
			"drain and delete the queue, or configure the type and limit it has: %w", queue, declared, err)
	}
	return fmt.Errorf("amqp: subscribe to topic %s (queue %s): %w", topic, queue, err)
}

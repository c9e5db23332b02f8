package amqp

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/metadata"
)

// reconsumeAfter is the pause before a subscription whose channel failed
// consumes again (watermill-amqp's).
const reconsumeAfter = 100 * time.Millisecond

// returnGrace is how long a subscription whose context ended waits, at
// most, for the other consumers of its subscriber to stop before it
// returns what it holds (see quiet).
const returnGrace = time.Second

// run consumes topic into out until ctx ends or the subscriber closes,
// again after each lost channel or connection.
func (s *subscriber) run(ctx context.Context, topic string, out chan<- *message.Message) {
	queue := QueueName(topic, s.group)
	for again := false; ; again = true {
		if again {
			select {
			case <-time.After(reconsumeAfter):
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
			if err := s.declare(topic); err != nil {
				s.log.Logger().Warn("amqp: declare the queue again after a lost channel", "topic", topic, "queue", queue, "error", err)
			}
		}
		if !s.conn.await(ctx.Done(), s.closing) {
			return
		}
		if s.consume(ctx, topic, queue, out) == stopped {
			return
		}
	}
}

// outcome is how a consumption or a delivery ended.
type outcome int

const (
	next    outcome = iota // go on
	lost                   // the channel failed: consume again
	stopped                // ctx ended or the subscriber closed
)

// consume consumes queue on a channel of its own until the channel fails
// (lost) or ctx ends or the subscriber closes (stopped). Closing the
// channel returns to the queue what it holds unacked; when stopped, only
// once the consumer is cancelled and the subscriber is quiet.
func (s *subscriber) consume(ctx context.Context, topic, queue string, out chan<- *message.Message) (o outcome) {
	ch, err := s.conn.channel()
	if err != nil {
		s.log.Logger().Warn("amqp: open a channel to consume; trying again", "topic", topic, "queue", queue, "error", err)
		return lost
	}
	c := &consumer{ch: ch, tag: "postroom-" + watermill.NewShortUUID(), s: s}
	defer func() {
		c.cancel()
		if o == stopped {
			s.quiet()
		}
		_ = ch.Close() // fails only when closed already
	}()
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		s.log.Logger().Warn("amqp: set the prefetch; trying again", "topic", topic, "queue", queue, "error", err)
		return lost
	}
	if !s.register(c) {
		return stopped
	}
	defer s.unregister(c)
	deliveries, err := c.start(queue)
	if errors.Is(err, errCancelled) {
		return stopped
	}
	if err != nil {
		s.log.Logger().Warn("amqp: start consuming; trying again", "topic", topic, "queue", queue, "error", err)
		return lost
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok { // the channel closed, or the consumer was cancelled
				if c.isCancelled() || ctx.Err() != nil || s.isClosing() {
					return stopped
				}
				s.log.Logger().Warn("amqp: consumer ended by the broker or a lost connection; consuming again", "topic", topic, "queue", queue)
				return lost
			}
			if o := s.deliver(ctx, c, d, topic, queue, out); o != next {
				return o
			}
		case <-ctx.Done():
			return stopped
		case <-s.closing:
			return stopped
		}
	}
}

// deliver hands d to out as a message and acks or nacks d as the message
// is settled. Messages are handed out one at a time per subscription.
//
// Once ctx ends, nothing more is handed out: d, if not taken, is nacked
// back to the queue, and a message already taken is still watched, its
// ack or nack passed on, until it is settled or the subscriber closes.
// Once the subscriber closes, what is not settled is nacked: RabbitMQ
// redelivers it.
func (s *subscriber) deliver(ctx context.Context, c *consumer, d amqp091.Delivery, topic, queue string, out chan<- *message.Message) outcome {
	msg, err := s.wcfg.Marshaler.Unmarshal(d)
	if err != nil { // Marshaler never fails; another one could
		s.log.Logger().Error("amqp: cannot read a delivery; nacked, RabbitMQ redelivers it", "topic", topic, "queue", queue, "error", err)
		return settle(d, false)
	}
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)
	if ctx.Err() != nil { // ended while the delivery was read
		c.cancel()
		s.quiet()
		settle(d, false)
		return stopped
	}
	select {
	case out <- msg:
	case <-ctx.Done():
		c.cancel()
		s.quiet()
		settle(d, false)
		return stopped
	case <-s.closing:
		settle(d, false)
		return stopped
	}
	if reason := msg.Metadata.Get(metadata.TransportError); reason != "" {
		s.log.Logger().Warn("amqp: received a message the transport could not read in full; it goes to the error topic",
			"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
	}
	o := next
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-s.closing:
		return settle(d, false)
	case <-ctx.Done():
		c.cancel() // no more deliveries; this one is still settled
		o = stopped
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-s.closing:
			return settle(d, false)
		}
	}
	acked := false
	select {
	case <-msg.Acked():
		acked = true
	default:
		s.logNack(msg, topic, queue)
		if o == stopped {
			s.quiet()
		}
	}
	if settle(d, acked) == lost {
		return lost
	}
	return o
}

// settle acks d or nacks it back to the queue; lost if the channel failed
// (RabbitMQ then redelivers d).
func settle(d amqp091.Delivery, ack bool) outcome {
	var err error
	if ack {
		err = d.Ack(false)
	} else {
		err = d.Nack(false, true)
	}
	if err != nil {
		return lost
	}
	return next
}

// register adds c to the consumers Close cancels; false once Close began.
func (s *subscriber) register(c *consumer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.consumers[c] = struct{}{}
	return true
}

func (s *subscriber) unregister(c *consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.consumers, c)
}

// activate and deactivate count the consumers started and not cancelled.
func (s *subscriber) activate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == 0 {
		s.idle = make(chan struct{})
	}
	s.active++
}

func (s *subscriber) deactivate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 {
		close(s.idle)
	}
}

// quiet waits, before a stopped subscription returns messages to the
// queue, until no consumer of the subscriber is active, or the subscriber
// closes, or returnGrace has passed. RabbitMQ would deliver a returned
// message to a consumer still active, and when the whole process is
// stopping (its context ends every subscription at once), that one would
// return it again: the returns would pile onto the head of the queue,
// each counted by a quorum queue against its delivery limit.
func (s *subscriber) quiet() {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-s.closing:
	case <-time.After(returnGrace):
	}
}

// isClosing reports whether Close has cancelled the consumers.
func (s *subscriber) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// errCancelled: the consumer was cancelled before it started.
var errCancelled = errors.New("amqp: consumer cancelled before it started")

// consumer is a subscription's consumer on its channel.
type consumer struct {
	ch  *amqp091.Channel
	tag string
	s   *subscriber // counts it while active

	mu        sync.Mutex
	started   bool
	cancelled bool
}

// start consumes queue, unless the consumer was cancelled first.
func (c *consumer) start(queue string) (<-chan amqp091.Delivery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled {
		return nil, errCancelled
	}
	deliveries, err := c.ch.Consume(queue, c.tag, false, false, false, false, nil)
	if err == nil {
		c.started = true
		c.s.activate()
	}
	return deliveries, err
}

// cancel tells RabbitMQ to deliver nothing more to the consumer (what it
// delivered stays unacked on the channel) and waits for its answer.
func (c *consumer) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled {
		return
	}
	c.cancelled = true
	if c.started {
		_ = c.ch.Cancel(c.tag, false) // fails only with the channel, which then returns everything anyway
		c.s.deactivate()
	}
}

func (c *consumer) isCancelled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled
}

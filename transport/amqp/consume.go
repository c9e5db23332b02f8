package amqp

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/metadata"
)

// returnGrace bounds quiet's wait.
const returnGrace = time.Second

// run consumes topic into out until ctx ends or the subscriber closes,
// again (with backoff) after each lost channel or connection.
func (s *subscriber) run(ctx context.Context, topic string, out chan<- *message.Message) {
	queue := QueueName(topic, s.group)
	// Shared by every channel of the subscription, so inFlight holds
	// across a lost channel; what a lost one handed out is settled or
	// given back before run returns.
	h := newHandedOut(s.inFlight)
	defer h.watchers.Wait()
	wait := backoffFirst
	for again := false; ; again = true {
		if again {
			next, jittered := nextBackoff(wait)
			select {
			case <-time.After(jittered):
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
			wait = next
		}
		if !s.conn.await(ctx.Done(), s.closing) {
			return
		}
		if again { // the queue may have gone with the broker
			if err := s.declare(topic); err != nil {
				s.log.Logger().Warn("amqp: declare the queue again after a lost channel", "topic", topic, "queue", queue, "error", err)
			}
		}
		began := time.Now()
		if s.consume(ctx, topic, queue, out, h) == stopped {
			return
		}
		if time.Since(began) >= backoffMax {
			wait = backoffFirst
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

// wind ends a stopped consumption: it cancels c, returns what its channel
// still buffers (not handed out) once the subscriber is quiet, and waits
// until what it handed out is settled or, at Close, given back.
func (s *subscriber) wind(c *consumer, deliveries <-chan amqp091.Delivery, h *handedOut, topic, queue string) {
	s.stop(c)
	if deliveries != nil {
		for d := range deliveries { // closed by the cancel, after what it buffered
			s.giveBack(d, topic, queue)
		}
	}
	h.watchers.Wait()
}

// prefetch is a subscription's basic.qos count: the configured prefetch,
// raised to inFlight, at most 65,535 (16 bits; 0 would mean no limit).
func prefetch(configured, inFlight int) int {
	return min(max(configured, inFlight), math.MaxUint16)
}

// handedOut bounds and counts a subscription's unsettled messages.
type handedOut struct {
	slots    chan struct{} // a token per message handed out; capacity inFlight
	watchers sync.WaitGroup
}

func newHandedOut(inFlight int) *handedOut {
	return &handedOut{slots: make(chan struct{}, inFlight)}
}

// consume consumes queue on a channel of its own until the channel fails
// (lost) or ctx ends or the subscriber closes (stopped, then see wind).
func (s *subscriber) consume(ctx context.Context, topic, queue string, out chan<- *message.Message, h *handedOut) (o outcome) {
	ch, err := s.conn.channel()
	if err != nil {
		s.log.Logger().Warn("amqp: open a channel to consume; trying again", "topic", topic, "queue", queue, "error", err)
		return lost
	}
	c := newConsumer(ch, "postroom-"+watermill.NewShortUUID())
	var deliveries <-chan amqp091.Delivery
	defer func() {
		if o == stopped {
			s.wind(c, deliveries, h, topic, queue)
		} else {
			c.cancel()
		}
		s.unregister(c)
		_ = ch.Close() // returns anything unacked; fails only when closed already
	}()
	if err := ch.Qos(prefetch(s.cfg.Prefetch, s.inFlight), 0, false); err != nil {
		s.log.Logger().Warn("amqp: set the prefetch; trying again", "topic", topic, "queue", queue, "error", err)
		return lost
	}
	if ctx.Err() != nil || !s.register(c) {
		return stopped
	}
	deliveries, err = c.start(queue)
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
				deliveries = nil
				if c.isCancelled() || ctx.Err() != nil || s.isClosing() {
					return stopped
				}
				if conn, _ := s.conn.current(); conn == nil || conn.IsClosed() {
					// The connection's own warning says it; one per subscription would repeat it.
					s.log.Logger().Debug("amqp: consumer ended with the connection; consuming again once it is back", "topic", topic, "queue", queue)
				} else {
					s.log.Logger().Warn("amqp: consumer ended by the broker (queue deleted?) or its channel failed; consuming again", "topic", topic, "queue", queue)
				}
				return lost
			}
			if o := s.deliver(ctx, c, d, topic, queue, out, h); o != next {
				return o
			}
		case <-ctx.Done():
			return stopped
		case <-s.closing:
			return stopped
		}
	}
}

// deliver hands d to out once the subscription holds fewer than inFlight,
// and starts the goroutine that acks or nacks d as the message is settled.
// Once stopped, nothing more is handed out and d, if not taken, is given
// back. A taken message is watched until settled or Close, which gives it
// back (a later ack is lost).
func (s *subscriber) deliver(ctx context.Context, c *consumer, d amqp091.Delivery, topic, queue string, out chan<- *message.Message, h *handedOut) outcome {
	msg, err := s.wcfg.Marshaler.Unmarshal(d)
	if err != nil { // Marshaler never fails; another one could
		s.log.Logger().Error("amqp: cannot read a delivery; nacked, RabbitMQ redelivers it", "topic", topic, "queue", queue, "error", err)
		return settle(d, false, false)
	}
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	giveBack := func() outcome {
		s.stop(c)
		s.giveBack(d, topic, queue)
		return stopped
	}
	if ctx.Err() != nil || s.isClosing() || c.isCancelled() { // ended while the delivery was read
		return giveBack()
	}
	if !sendUnlessStopped(ctx, s, c, h.slots, struct{}{}) {
		return giveBack()
	}
	msgCtx, cancel := context.WithCancel(ctx)
	msg.SetContext(msgCtx)
	if !sendUnlessStopped(ctx, s, c, out, msg) {
		cancel()
		<-h.slots
		return giveBack()
	}
	if reason := msg.Metadata.Get(metadata.TransportError); reason != "" {
		s.log.Logger().Warn("amqp: received a message the transport could not read in full; it goes to the error topic",
			"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
	}
	h.watchers.Add(1)
	go func() {
		defer h.watchers.Done()
		defer func() { <-h.slots }()
		defer cancel()
		s.settleSettled(ctx, c, d, msg, topic, queue)
	}()
	return next
}

// sendUnlessStopped sends v on ch, unless ctx ends, the subscriber closes
// or c is cancelled (Close cancels every consumer) first; false if so.
func sendUnlessStopped[T any](ctx context.Context, s *subscriber, c *consumer, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
	case <-s.closing:
	case <-c.done:
	}
	return false
}

// settleSettled acks or nacks d as msg is, or gives it back when the
// subscriber closes first.
func (s *subscriber) settleSettled(ctx context.Context, c *consumer, d amqp091.Delivery, msg *message.Message, topic, queue string) {
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-s.closing:
		if !isAcked(msg) { // an ack that raced the Close still counts
			s.stop(c)
			s.giveBack(d, topic, queue)
			return
		}
	}
	acked := isAcked(msg)
	stopping := false
	if !acked {
		stopping = ctx.Err() != nil || s.isClosing()
		if stopping { // no redelivery to this consumer, counted again on a quorum queue
			s.stop(c)
		}
		s.logNack(msg, topic, queue, stopping)
	}
	settle(d, acked, stopping)
}

// isAcked reports whether msg was acked.
func isAcked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}

// settle acks d, or returns it to the queue: with a nack when a stopping
// subscription gives it back, with a reject when its handling failed. A
// quorum queue's delivery count (and the bus's poison-loop guard with it)
// counts a reject on every RabbitMQ; from 4.3 on it does not count a
// nack. Lost if the channel failed (RabbitMQ then redelivers d).
func settle(d amqp091.Delivery, ack, givenBack bool) outcome {
	var err error
	switch {
	case ack:
		err = d.Ack(false)
	case givenBack:
		err = d.Nack(false, true)
	default:
		err = d.Reject(true)
	}
	if err != nil {
		return lost
	}
	return next
}

// giveBack nacks d back to the queue for a stopping subscription, logging
// an error if that takes d past its quorum queue's delivery limit.
func (s *subscriber) giveBack(d amqp091.Delivery, topic, queue string) {
	if count, _ := headerString(d.Headers[deliveryCountHeader]); s.pastDeliveryLimit(count) {
		id, _ := deliveryID(d)
		s.log.Logger().Error("amqp: message returned while stopping at its queue's delivery limit; RabbitMQ drops it",
			"message_id", id, "topic", topic, "queue", queue, "delivery_limit", s.cfg.DeliveryLimit)
	}
	settle(d, false, true)
}

// register adds c to the consumers Close cancels, counted as active until
// cancelled; false once Close began.
func (s *subscriber) register(c *consumer) bool {
	c.mu.Lock() // the order everywhere: c.mu, then s.mu
	defer c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.consumers[c] = struct{}{}
	if s.active == 0 {
		s.idle = make(chan struct{})
	}
	s.active++
	c.s = s
	return true
}

func (s *subscriber) unregister(c *consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.consumers, c)
}

// deactivate counts c as no longer active.
func (s *subscriber) deactivate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 {
		close(s.idle)
	}
}

// stop cancels c and, once per consumer, waits for the subscriber to be
// quiet (see quiet) before the caller returns messages to the queue.
func (s *subscriber) stop(c *consumer) {
	c.cancel()
	if c.quietOnce() {
		s.quiet()
	}
}

// quiet waits until no consumer of the subscriber is active, it closes,
// or returnGrace passes. Otherwise, in a stopping process, a returned
// message would go to a consumer still active and be returned again, each
// counted against a quorum queue's delivery limit.
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

	done chan struct{} // closed by cancel

	mu      sync.Mutex
	s       *subscriber // set by register: the subscriber counting it as active
	started bool
	quieted bool
}

func newConsumer(ch *amqp091.Channel, tag string) *consumer {
	return &consumer{ch: ch, tag: tag, done: make(chan struct{})}
}

// start consumes queue, unless the consumer was cancelled first.
func (c *consumer) start(queue string) (<-chan amqp091.Delivery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCancelled() {
		return nil, errCancelled
	}
	deliveries, err := c.ch.Consume(queue, c.tag, false, false, false, false, nil)
	c.started = err == nil
	return deliveries, err
}

// cancel stops RabbitMQ delivering to the consumer (what it delivered stays
// unacked) and waits for its answer.
func (c *consumer) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCancelled() {
		return
	}
	close(c.done)
	if c.started {
		_ = c.ch.Cancel(c.tag, false) // fails only with the channel, which then returns everything anyway
	}
	if c.s != nil {
		c.s.deactivate()
	}
}

// isCancelled reports whether cancel was called (exact under c.mu).
func (c *consumer) isCancelled() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// quietOnce reports whether this is the consumer's first wait for quiet.
func (c *consumer) quietOnce() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.quieted
	c.quieted = true
	return first
}

package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/deliverylimit"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// subscriber is one group's consumer of RabbitMQ queues: each
// subscription is a channel with a consumer of the topic's queue, on one
// connection that reconnects; queues, exchanges and bindings are declared
// as watermill-amqp declares them.
// It is postroom's own, not watermill-amqp's Subscriber, so that Close can
// cancel every consumer before any message goes back to the queue (see
// Close). It logs the messages marked with metadata.TransportError and
// the nacks (RabbitMQ requeues a nacked message at once), and explains a
// queue declared with other arguments.
type subscriber struct {
	conn     *connection
	wcfg     wamqp.Config // the topology watermill-amqp would declare
	group    string
	inFlight int // messages a subscription hands out at once
	cfg      Config
	log      *logsink.Sink
	record   *declaredNames

	mu        sync.Mutex
	closed    bool
	consumers map[*consumer]struct{} // those consuming now
	active    int                    // consumers started and not cancelled
	idle      chan struct{}          // closed when active falls to 0
	running   sync.WaitGroup         // one per subscription

	closing   chan struct{} // closed by Close once every consumer is cancelled
	closeOnce sync.Once
	closeErr  error
}

var (
	_ message.Subscriber           = (*subscriber)(nil)
	_ message.SubscribeInitializer = (*subscriber)(nil)
)

// newSubscriber connects a subscriber of group with watermill-amqp's
// config wcfg.
func newSubscriber(wcfg wamqp.Config, group string, inFlight int, cfg Config, log *logsink.Sink, record *declaredNames) (*subscriber, error) {
	conn, err := dial(cfg.URL, log, "the subscriber of group "+group)
	if err != nil {
		return nil, err
	}
	return &subscriber{conn: conn, wcfg: wcfg, group: group, inFlight: inFlight, cfg: cfg, log: log, record: record,
		consumers: map[*consumer]struct{}{}, closing: make(chan struct{})}, nil
}

// connected reports whether the subscriber's connection is up; a closed
// subscriber counts as up (it holds no connection it needs).
func (s *subscriber) connected() bool { return s.isClosed() || s.conn.up() }

// isClosed reports whether Close was called.
func (s *subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Subscribe consumes topic from the group's queue, declaring and binding
// it. The channel closes when ctx ends or the subscriber closes; after a
// lost connection the subscription consumes again once it is back.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("amqp: subscribe to topic %s: the subscriber is closed", topic)
	}
	out := make(chan *message.Message)
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		defer close(out)
		s.run(ctx, topic, out)
	}()
	return out, nil
}

// SubscribeInitialize declares the group's queue for topic and binds it.
func (s *subscriber) SubscribeInitialize(topic string) error {
	s.record.exchange(ExchangeName(topic))
	s.record.queue(QueueName(topic, s.group))
	if err := s.declare(topic); err != nil {
		return s.explain(topic, err)
	}
	return nil
}

// declare declares topic's exchange, the group's queue and its binding.
// A quorum error queue declared before it had its delivery limit
// (deliverylimit.ErrorQueue) is used as it is, with a warning: RabbitMQ
// does not change an existing queue's arguments. The operator's tools run
// the same check (deliverylimit.Check) when they open the error queue.
func (s *subscriber) declare(topic string) error {
	err := s.declareWith(topic, s.wcfg)
	if err == nil || s.group != transport.ErrorQueueGroup || !deliverylimit.Missing(err) {
		return err
	}
	older := s.wcfg
	older.Queue.Arguments = maps.Clone(s.wcfg.Queue.Arguments)
	delete(older.Queue.Arguments, deliverylimit.Arg)
	if err := s.declareWith(topic, older); err != nil {
		return err
	}
	s.log.Logger().Warn("amqp: "+deliverylimit.Warning, "queue", QueueName(topic, s.group))
	return nil
}

// declareWith declares with wcfg's topology, on a channel of its own.
func (s *subscriber) declareWith(topic string, wcfg wamqp.Config) error {
	ch, err := s.conn.channel()
	if err != nil {
		return fmt.Errorf("open a channel: %w", err)
	}
	defer ch.Close() //nolint:errcheck // a declare that failed closed it already
	builder := &wamqp.DefaultTopologyBuilder{}
	return builder.BuildTopology(ch, wamqp.BuildTopologyParams{
		Topic:        topic,
		QueueName:    wcfg.Queue.GenerateName(topic),
		ExchangeName: wcfg.Exchange.GenerateName(topic),
		RoutingKey:   wcfg.QueueBind.GenerateRoutingKey(topic),
	}, wcfg, s.log.Watermill())
}

// Close stops every subscription and closes the connection. It first
// cancels every consumer, so RabbitMQ delivers nothing more to this
// subscriber, and only then returns the messages its subscriptions hold
// (nacked, or with their channel). Returning them first would let RabbitMQ
// deliver them to a subscription not yet stopped, which returns them
// again: on quorum queues each return counts towards the delivery limit,
// so one stop of many subscriptions under a backlog would count the
// messages at the head of the queue many times over. A handler's ack
// after Close is lost: RabbitMQ redelivers the message. Close waits for
// the broker at most closeWait in all: after that it closes the
// connection, which returns everything, and the subscriptions stuck on
// the broker return.
func (s *subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		consumers := make([]*consumer, 0, len(s.consumers))
		for c := range s.consumers {
			consumers = append(consumers, c)
		}
		s.mu.Unlock()
		deadline := time.Now().Add(closeWait)
		var cancels sync.WaitGroup
		for _, c := range consumers {
			cancels.Go(c.cancel)
		}
		if !waitUntil(&cancels, deadline) {
			s.log.Logger().Warn("amqp: the broker did not answer the consumers' cancel; closing the subscriber's connection anyway",
				"group", s.group, "waited", closeWait)
		}
		close(s.closing)
		waitUntil(&s.running, deadline) // a subscription stuck on a silent broker returns once the connection is closed
		s.closeErr = s.conn.Close(deadline)
		s.running.Wait()
	})
	return s.closeErr
}

// waitUntil waits for wg until deadline; false if the deadline came first.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(time.Until(deadline)):
		return false
	}
}

// logNack logs msg's nack, if it was nacked: at warn (RabbitMQ requeues
// it), at info when the subscription is stopping (a handler cut short by
// the stop), or at error past its quorum queue's delivery limit (RabbitMQ
// drops it), stopping or not.
func (s *subscriber) logNack(msg *message.Message, topic, queue string, stopping bool) {
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
	if stopping { // a handler cut short by the stop: routine
		s.log.Logger().Info("amqp: message nacked while its subscription stops; RabbitMQ requeues it",
			"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
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
	return s.pastDeliveryLimit(msg.Metadata.Get(metadata.DeliveryCount))
}

// pastDeliveryLimit reports whether one more return of a message whose
// x-delivery-count is count takes it past its quorum queue's delivery
// limit, so that RabbitMQ drops it.
func (s *subscriber) pastDeliveryLimit(count string) bool {
	if s.cfg.QueueType != QueueQuorum || s.group == transport.ErrorQueueGroup {
		return false
	}
	before, _ := strconv.Atoi(count)
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

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

// subscriber is one group's consumer of RabbitMQ queues: a channel and
// consumer per subscription, on one reconnecting connection, with
// watermill-amqp's topology. It is postroom's own so that Close can cancel
// every consumer before any message goes back to the queue.
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

// declare declares topic's exchange, the group's queue and its binding. A
// quorum error queue declared without deliverylimit.ErrorQueue is used as
// it is, with a warning (RabbitMQ does not change a queue's arguments).
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

// Close stops every subscription and closes the connection. It cancels
// every consumer before it returns any message held, or RabbitMQ would
// hand returns to a subscription not yet stopped, counting each again
// against a quorum queue's delivery limit. A handler's ack after Close is
// lost (RabbitMQ redelivers). Close waits for the broker at most closeWait.
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

// logNack logs msg's nack, if any: at warn, at info while stopping, at
// error past its quorum queue's delivery limit (RabbitMQ drops it).
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
	if stopping {
		s.log.Logger().Info("amqp: message nacked while its subscription stops; RabbitMQ requeues it",
			"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
		return
	}
	s.log.Logger().Warn("amqp: message nacked; RabbitMQ requeues it for immediate redelivery",
		"message_id", msg.UUID, "topic", topic, "queue", queue, "reason", reason)
}

// atDeliveryLimit reports whether msg's nack takes it past its quorum
// queue's delivery limit (see pastDeliveryLimit).
func (s *subscriber) atDeliveryLimit(msg *message.Message) bool {
	return s.pastDeliveryLimit(msg.Metadata.Get(metadata.DeliveryCount))
}

// pastDeliveryLimit reports whether one more return of a message whose
// x-delivery-count is count makes RabbitMQ drop it.
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

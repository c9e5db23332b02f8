package amqp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/closers"
	"github.com/postroom/postroom/internal/deliverylimit"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/transport"
)

// QueueType is the type of the queues a subscriber declares.
type QueueType string

// Queue types.
const (
	// QueueClassic is RabbitMQ's classic queue.
	QueueClassic QueueType = "classic"
	// QueueQuorum is a replicated quorum queue, declared with
	// x-queue-type=quorum and x-delivery-limit.
	QueueQuorum QueueType = "quorum"
)

// Defaults of Config.
const (
	// QueueTypeDefault is the default Config.QueueType.
	QueueTypeDefault = QueueClassic
	// DeliveryLimitDefault is the default Config.DeliveryLimit.
	DeliveryLimitDefault = 20
	// PrefetchDefault is the default Config.Prefetch (raised to a
	// subscription's inFlight); no more keeps competing consumers fair.
	PrefetchDefault = 1
)

// Config configures the RabbitMQ transport.
type Config struct {
	// URL is the broker's AMQP URL. Required (POSTROOM_AMQP_URL in the commands).
	URL string
	// Logger receives the transport's logs (see SetLogger; a bus sets its
	// own). Defaults to nil: discarded.
	Logger *slog.Logger
	// QueueType is the type of the queues subscribers declare. An existing
	// queue keeps its type: RabbitMQ refuses to redeclare it with another.
	// Defaults to QueueTypeDefault (classic).
	QueueType QueueType
	// DeliveryLimit is the x-delivery-limit of quorum queues: RabbitMQ drops
	// (or dead-letters) a message returned more often than that, a guard
	// behind the bus's own retries. bus.New refuses a limit below its
	// Config.MaxDeliveries + 5. Quorum queues only. Defaults to
	// DeliveryLimitDefault (20).
	DeliveryLimit int
	// Prefetch is the basic.qos prefetch count of each subscription's
	// channel, raised to its inFlight. Defaults to PrefetchDefault (1).
	Prefetch int
}

// withDefaults returns c with unset fields at their defaults.
func (c Config) withDefaults() Config {
	c.QueueType = cmp.Or(c.QueueType, QueueTypeDefault)
	if c.QueueType == QueueQuorum {
		c.DeliveryLimit = cmp.Or(c.DeliveryLimit, DeliveryLimitDefault)
	}
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	return c
}

// validate returns every problem of c (after withDefaults).
func (c Config) validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("amqp: Config.URL is empty: set it, e.g. amqp://guest:guest@127.0.0.1:5672/"))
	} else if _, err := amqp091.ParseURI(c.URL); err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok { // it repeats the URL, password and all
			err = ue.Err
		}
		errs = append(errs, fmt.Errorf("amqp: Config.URL: %w: use amqp://user:password@host:5672/vhost or amqps://…", err))
	}
	switch c.QueueType {
	case QueueClassic:
		if c.DeliveryLimit != 0 {
			errs = append(errs, fmt.Errorf("amqp: Config.DeliveryLimit %d applies to quorum queues only: set QueueType to %q or leave DeliveryLimit 0", c.DeliveryLimit, QueueQuorum))
		}
	case QueueQuorum:
		if c.DeliveryLimit < 0 {
			errs = append(errs, fmt.Errorf("amqp: Config.DeliveryLimit %d is negative: set a positive limit or 0 for the default %d", c.DeliveryLimit, DeliveryLimitDefault))
		}
	default:
		errs = append(errs, fmt.Errorf("amqp: Config.QueueType %q is unknown: use %q or %q", c.QueueType, QueueClassic, QueueQuorum))
	}
	if c.Prefetch < 0 {
		errs = append(errs, fmt.Errorf("amqp: Config.Prefetch %d is negative: set a positive count or 0 for the default %d", c.Prefetch, PrefetchDefault))
	}
	if c.Prefetch > math.MaxUint16 {
		errs = append(errs, fmt.Errorf("amqp: Config.Prefetch %d is over RabbitMQ's %d: lower it", c.Prefetch, math.MaxUint16))
	}
	return errors.Join(errs...)
}

// Transport is the RabbitMQ transport.
type Transport struct {
	cfg       Config
	log       *logsink.Sink
	publisher *confirmPublisher
	declared  *declaredNames

	opened closers.Closers

	mu          sync.Mutex
	subscribers []*subscriber // for Connected
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Mandatory    = (*Transport)(nil)
	_ transport.LoggerSetter = (*Transport)(nil)
	_ transport.Connectivity = (*Transport)(nil)
)

// New returns a transport for cfg; it connects nothing. The publisher
// connects on its first publish, each subscriber when it is created.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := logsink.New(cfg.Logger)
	declared := &declaredNames{}
	return &Transport{cfg: cfg, log: log, declared: declared,
		publisher: newConfirmPublisher(cfg.URL, log, declared)}, nil
}

// Capabilities: the broker and vhost as its reach, and the quorum queues'
// delivery limit.
func (t *Transport) Capabilities() transport.Capabilities {
	quorum := t.cfg.QueueType == QueueQuorum
	return transport.Capabilities{Reach: t.reach(), DeliveryLimit: t.deliveryLimit(),
		CountsDeliveries: quorum, MarksRedeliveries: !quorum}
}

// reach names the broker and vhost ("amqp://host:5672/%2F", no
// credentials): services sharing a database relay each other's outbox
// only when their URLs name the broker the same way.
func (t *Transport) reach() string {
	uri, err := amqp091.ParseURI(t.cfg.URL)
	if err != nil { // no dial succeeds with it either; never the URL, which may hold a password
		return "amqp:unreadable-url"
	}
	return fmt.Sprintf("%s://%s:%d/%s", uri.Scheme, strings.ToLower(uri.Host), uri.Port, url.PathEscape(uri.Vhost))
}

// config is watermill-amqp's durable pub/sub config with postroom's
// marshaler, queue names, queue arguments and prefetch.
func (t *Transport) config(group string) wamqp.Config {
	c := wamqp.NewDurablePubSubConfig(t.cfg.URL, func(topic string) string { return QueueName(topic, group) })
	c.Marshaler = Marshaler{}
	c.Consume.Qos.PrefetchCount = t.cfg.Prefetch
	if t.cfg.QueueType == QueueQuorum {
		c.Queue.Arguments = amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum,
			deliverylimit.Arg: int64(t.cfg.DeliveryLimit)}
		if group == transport.ErrorQueueGroup {
			// Browsing the error queue returns its messages, which a limit
			// counts; without the argument RabbitMQ 4.0-4.2 impose 20.
			c.Queue.Arguments[deliverylimit.Arg] = int64(deliverylimit.ErrorQueue)
		}
	}
	return c
}

// SetLogger sends the transport's logs, of publisher and subscribers
// created before too, to l from now on. Nil discards them.
func (t *Transport) SetLogger(l *slog.Logger) { t.log.Set(l) }

// Publisher returns the publisher. Publish returns once the broker has
// confirmed every message, so one it did not take is an error. A message
// to a topic no queue is bound to is dropped without an error; use
// PublishMandatory to be told.
func (t *Transport) Publisher() message.Publisher { return plainPublisher{t.publisher} }

// plainPublisher is the Publisher: confirmed, not mandatory.
type plainPublisher struct{ p *confirmPublisher }

// Publish publishes msgs to topic and waits for the broker's confirms.
func (p plainPublisher) Publish(topic string, msgs ...*message.Message) error {
	return p.p.publish(topic, msgs, false)
}

// Close closes the publisher's connection; later publishes fail.
func (p plainPublisher) Close() error { return p.p.close() }

// PublishMandatory publishes msgs to topic like Publisher().Publish and
// fails with an error wrapping transport.ErrNoRoute for each message no
// queue took.
func (t *Transport) PublishMandatory(topic string, msgs ...*message.Message) error {
	return t.publisher.publish(topic, msgs, true)
}

// Subscriber returns a subscriber whose queue for a topic is
// QueueName(topic, group) and whose subscriptions each hand out up to
// inFlight messages at once (with a prefetch of at least as many).
func (t *Transport) Subscriber(group string, inFlight int) (message.Subscriber, error) {
	s, err := newSubscriber(t.config(group), group, max(inFlight, 1), t.cfg, t.log, t.declared)
	if err != nil {
		return nil, fmt.Errorf("amqp: connect subscriber: %w", err)
	}
	t.opened.Add(s)
	t.mu.Lock()
	t.subscribers = append(t.subscribers, s)
	t.mu.Unlock()
	return s, nil
}

// Connected reports whether every open subscriber's connection is up
// (transport.Connectivity). The publisher, which connects on demand, is
// not counted: a bus always has a subscriber on the same broker.
func (t *Transport) Connected() bool {
	t.mu.Lock()
	t.subscribers = slices.DeleteFunc(t.subscribers, (*subscriber).isClosed)
	subs := slices.Clone(t.subscribers)
	t.mu.Unlock()
	for _, s := range subs {
		if !s.connected() {
			return false
		}
	}
	return true
}

// deliveryLimit is the quorum queues' x-delivery-limit, or 0 for classic.
func (t *Transport) deliveryLimit() int {
	if t.cfg.QueueType != QueueQuorum {
		return 0
	}
	return t.cfg.DeliveryLimit
}

// Close closes the publishers and every subscriber.
func (t *Transport) Close() error {
	return errors.Join(t.publisher.close(), t.opened.Close())
}

package amqp

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport"
)

// Config configures the RabbitMQ transport.
type Config struct {
	// URL is the broker's AMQP URL. Required (POSTROOM_AMQP_URL in the commands).
	URL string
	// Logger is Watermill's logger. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Transport is the RabbitMQ transport.
type Transport struct {
	cfg       Config
	publisher *amqp.Publisher

	opened transport.Closers
}

// New connects a publisher to the broker.
func New(cfg Config) (*Transport, error) {
	if cfg.URL == "" {
		return nil, errors.New("amqp: Config.URL is empty: set POSTROOM_AMQP_URL, e.g. amqp://guest:guest@127.0.0.1:5672/")
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	pub, err := amqp.NewPublisher(amqp.NewDurablePubSubConfig(cfg.URL, nil), cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("amqp: connect publisher: %w", err)
	}
	return &Transport{cfg: cfg, publisher: pub}, nil
}

// Publisher returns the publisher.
func (t *Transport) Publisher() message.Publisher { return t.publisher }

// Subscriber returns a subscriber whose queue for a topic is "<topic>_<group>".
func (t *Transport) Subscriber(group string) (message.Subscriber, error) {
	sub, err := amqp.NewSubscriber(amqp.NewDurablePubSubConfig(t.cfg.URL, amqp.GenerateQueueNameTopicNameWithSuffix(group)), t.cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("amqp: connect subscriber: %w", err)
	}
	t.opened.Add(sub)
	return sub, nil
}

// Competing is true: subscriptions of one group share the queue.
func (t *Transport) Competing() bool { return true }

// Close closes the publisher and every subscriber.
func (t *Transport) Close() error {
	return errors.Join(t.publisher.Close(), t.opened.Close())
}

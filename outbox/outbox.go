package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// Defaults of Config.
const (
	TopicDefault        = "postroom_outbox"
	PollIntervalDefault = 100 * time.Millisecond
)

// ErrNoTransaction is returned by Publish when tx is not a transaction.
var ErrNoTransaction = errors.New("outbox: Publish needs the handler's transaction (*gorm.DB from a unit of work)")

// Config configures the outbox.
type Config struct {
	// DB is the PostgreSQL or MySQL database of the handlers' transactions. Required.
	DB *gorm.DB
	// Destination is where the relay publishes (the bus's transport). Required.
	Destination message.Publisher
	// Topic is the outbox's watermill-sql topic. Defaults to "postroom_outbox".
	Topic string
	// PollInterval is how often the relay looks for new messages when idle. Defaults to 100ms.
	PollInterval time.Duration
	// Logger is Watermill's logger. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Outbox writes messages through transactions and relays them.
type Outbox struct {
	cfg       Config
	schema    wsql.SchemaAdapter
	forwarder *forwarder.Forwarder
	sub       *wsql.Subscriber
}

// New validates cfg, creates the outbox tables if needed and prepares the relay.
func New(cfg Config) (*Outbox, error) {
	cfg.Topic = cmp.Or(cfg.Topic, TopicDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if cfg.DB == nil || cfg.Destination == nil {
		return nil, errors.New("outbox: Config.DB and Config.Destination are required")
	}
	if err := dialect.ValidateIdentifier(cfg.Topic); err != nil {
		return nil, fmt.Errorf("outbox: Config.Topic: %w", err)
	}
	d, err := dialect.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	o := &Outbox{cfg: cfg}
	var offsets wsql.OffsetsAdapter
	switch d {
	case dialect.Postgres:
		o.schema, offsets = wsql.DefaultPostgreSQLSchema{GeneratePayloadType: bytea}, wsql.DefaultPostgreSQLOffsetsAdapter{}
	case dialect.MySQL:
		o.schema, offsets = wsql.DefaultMySQLSchema{GeneratePayloadType: blob}, wsql.DefaultMySQLOffsetsAdapter{}
	default:
		return nil, fmt.Errorf("outbox: needs PostgreSQL or MySQL, not %s: on SQLite the bus sends after commit (docs/guarantees.md)", d)
	}
	sqlDB, err := cfg.DB.DB()
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	o.sub, err = wsql.NewSubscriber(wsql.BeginnerFromStdSQL(sqlDB), wsql.SubscriberConfig{
		ConsumerGroup:  relayGroup,
		PollInterval:   cfg.PollInterval,
		ResendInterval: cfg.PollInterval,
		SchemaAdapter:  o.schema,
		OffsetsAdapter: offsets,
	}, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay subscriber: %w", err)
	}
	// Publishing in a transaction cannot create tables: create them now.
	if err := o.sub.SubscribeInitialize(cfg.Topic); err != nil {
		return nil, fmt.Errorf("outbox: create the outbox tables: %w", err)
	}
	o.forwarder, err = forwarder.NewForwarder(o.sub, cfg.Destination, cfg.Logger, forwarder.Config{ForwarderTopic: cfg.Topic})
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: %w", err)
	}
	return o, nil
}

func bytea(string) string { return "BYTEA" }
func blob(string) string  { return "LONGBLOB" }

// Publish writes msgs for topic into the outbox through tx. They reach the
// broker after tx commits, and never if it rolls back.
func (o *Outbox) Publish(ctx context.Context, tx *gorm.DB, topic string, msgs ...*message.Message) error {
	sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return ErrNoTransaction
	}
	pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(sqlTx), wsql.PublisherConfig{SchemaAdapter: o.schema}, o.cfg.Logger)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	for _, m := range msgs {
		m.SetContext(ctx)
	}
	if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: o.cfg.Topic}).Publish(topic, msgs...); err != nil {
		return fmt.Errorf("outbox: write to %s: %w", topic, err)
	}
	return nil
}

// Run relays committed messages until ctx is done or Close is called.
func (o *Outbox) Run(ctx context.Context) error { return o.forwarder.Run(ctx) }

// Running is closed once the relay runs.
func (o *Outbox) Running() chan struct{} { return o.forwarder.Running() }

// Close stops the relay.
func (o *Outbox) Close() error { return errors.Join(o.forwarder.Close(), o.sub.Close()) }

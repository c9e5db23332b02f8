package sql

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/closers"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/transport"
)

// PollIntervalDefault is how long a subscriber waits when it found no message.
const PollIntervalDefault = 100 * time.Millisecond

// AckDeadlineDefault is the default Config.AckDeadline: watermill-sql's.
const AckDeadlineDefault = 30 * time.Second

// Config configures the SQL transport.
type Config struct {
	// DB is the PostgreSQL or MySQL database. Required.
	DB *gorm.DB
	// PollInterval is how long a subscriber waits when it found no message. Defaults to 100ms.
	PollInterval time.Duration
	// AckDeadline is how long a message may take from the moment it is
	// read, retries and backoff included; then it is read again (see the
	// package documentation). Defaults to AckDeadlineDefault (30 s).
	AckDeadline time.Duration
	// Logger receives watermill-sql's logs; SetLogger replaces it, and the
	// bus sets its own. Defaults to discarding them.
	Logger *slog.Logger
}

var _ transport.LoggerSetter = (*Transport)(nil)

// Transport is the SQL transport.
type Transport struct {
	cfg       Config
	log       *logsink.Sink
	dialect   dialect.Dialect
	db        wsql.Beginner
	schema    wsql.SchemaAdapter
	offsets   wsql.OffsetsAdapter
	publisher publisher

	groupsChecked sync.Map // offsets tables whose group column binaryGroups looked at

	opened closers.Closers
}

// New returns a SQL transport on cfg.DB.
func New(cfg Config) (*Transport, error) {
	if cfg.DB == nil {
		return nil, errors.New("sql: Config.DB is nil: pass the PostgreSQL or MySQL *gorm.DB")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = PollIntervalDefault
	}
	if cfg.AckDeadline < 0 {
		return nil, fmt.Errorf("sql: Config.AckDeadline %s is negative", cfg.AckDeadline)
	}
	if cfg.AckDeadline == 0 {
		cfg.AckDeadline = AckDeadlineDefault
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("sql: %w", err)
	}
	t := &Transport{cfg: cfg, log: logsink.New(cfg.Logger), dialect: d}
	// Batches of one (Dialect.TransportSchema): the offsets adapter acks a
	// whole fetched batch.
	sqlDB, err := cfg.DB.DB()
	if err != nil {
		return nil, fmt.Errorf("sql: %w", err)
	}
	if t.schema, t.offsets, err = d.TransportSchema(sqlDB); err != nil {
		return nil, fmt.Errorf("sql: the SQL transport needs PostgreSQL or MySQL: use the gochannel transport with SQLite: %w", err)
	}
	t.db = wsql.BeginnerFromStdSQL(sqlDB)
	wp, err := wsql.NewPublisher(t.db, wsql.PublisherConfig{SchemaAdapter: t.schema, AutoInitializeSchema: true}, t.log.Watermill())
	if err != nil {
		return nil, fmt.Errorf("sql: publisher: %w", err)
	}
	t.publisher = publisher{wp}
	return t, nil
}

// SetLogger sends watermill-sql's logs to l from now on, also those of
// publishers and subscribers created before. Nil discards them.
func (t *Transport) SetLogger(l *slog.Logger) { t.log.Set(l) }

// Publisher returns the publisher.
func (t *Transport) Publisher() message.Publisher { return t.publisher }

// Subscriber returns a subscriber of consumer group group. Its
// subscriptions hand out one message at a time whatever inFlight is
// (transport.Capabilities.Sequential).
func (t *Transport) Subscriber(group string, _ int) (message.Subscriber, error) {
	sub, err := wsql.NewSubscriber(trackedBeginner{t.db}, wsql.SubscriberConfig{
		ConsumerGroup:    group,
		PollInterval:     t.cfg.PollInterval,
		ResendInterval:   t.cfg.PollInterval,
		AckDeadline:      &t.cfg.AckDeadline,
		SchemaAdapter:    t.schema,
		OffsetsAdapter:   t.offsets,
		InitializeSchema: true,
	}, t.log.Watermill())
	if err != nil {
		return nil, fmt.Errorf("sql: subscriber: %w", err)
	}
	s := newSubscriber(sub, t, group)
	t.opened.Add(s)
	return s, nil
}

// Capabilities: Sequential (a group's subscriptions take turns on its
// offsets row); Reach "sql", since its topics are tables of the database
// the bus keeps its delayed messages in; MarksRedeliveries (first reads
// and deliveries nacked or acked late are marked).
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{Sequential: true, Reach: "sql", MarksRedeliveries: true}
}

// Close closes the publisher and every subscriber.
func (t *Transport) Close() error {
	return errors.Join(t.publisher.Close(), t.opened.Close())
}

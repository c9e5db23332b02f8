package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
)

// Defaults of Config.
const (
	TopicDefault            = dialect.OutboxTopicDefault
	PollIntervalDefault     = 100 * time.Millisecond
	ErrorTopicDefault       = "error"
	MaxRelayAttemptsDefault = 5
	StopTimeoutDefault      = 20 * time.Second
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
	// Reach names the subscribers Destination reaches
	// (transport.Capabilities.Reach). Messages are written with it, and a
	// relay publishing one of another reach says so at error: services
	// sharing this outbox may not reach each other. Defaults to "".
	Reach string
	// PollInterval is how often the relay looks for new messages when idle. Defaults to 100ms.
	PollInterval time.Duration
	// ErrorTopic receives a message the destination refused
	// MaxRelayAttempts times, with the reason in its metadata, so one
	// poison message does not stop the relay. Defaults to "error".
	ErrorTopic string
	// MaxRelayAttempts is how often the relay tries one message before it
	// moves it to ErrorTopic (only if ErrorTopic takes it: through an
	// outage the relay keeps trying). An attempt that could not reach the
	// broker (transport.ErrUnreachable) or the SQL transport's database is
	// not counted. Defaults to 5.
	MaxRelayAttempts int
	// PublishCommand publishes a command (from bus.Send), failing when no
	// queue takes it. Defaults to nil: commands go through Destination.
	PublishCommand func(topic string, msg *message.Message) error
	// OnMovedAside is called for each message moved to ErrorTopic. Defaults to nil.
	OnMovedAside func(topic string, msg *message.Message, reason error)
	// StopTimeout is how long a stop (Run's context ending, or Close)
	// lets the relay finish the publish in flight and record its batch as
	// relayed; past it, the batch's published messages are relayed again
	// by the next relay. Defaults to 20 s; negative: cut at once.
	StopTimeout time.Duration
	// Logger is Watermill's logger. A refusing transport is logged when
	// the relay starts failing, then at most every 30 s, and at info when
	// it recovers; at warn through a logger with a Log(slog.Level, string,
	// error, watermill.LogFields) method (the bus's), else at error.
	// Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter

	// ackDeadline (30 s) and outageReminder (outageReminderDefault) are
	// shortened by tests: how long the relay waits for one publish before
	// it reads its batch again, and how often it repeats that it fails.
	ackDeadline    time.Duration
	outageReminder time.Duration
}

// Outbox writes messages through transactions and relays them.
type Outbox struct {
	cfg       Config
	d         dialect.Dialect
	schema    wsql.SchemaAdapter
	forwarder *forwarder.Forwarder
	sub       *wsql.Subscriber
	relaySub  *stoppingSubscriber // sub as the relay's router sees it

	mu     sync.Mutex
	ran    chan struct{} // made when the relay's router is started, closed when its Run returned
	closed bool
}

// New validates cfg and prepares the relay. It does no I/O: Run creates
// the outbox tables if `postroom migrate` has not.
func New(cfg Config) (*Outbox, error) {
	cfg.Topic = cmp.Or(cfg.Topic, TopicDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.ErrorTopic = cmp.Or(cfg.ErrorTopic, ErrorTopicDefault)
	cfg.MaxRelayAttempts = cmp.Or(cfg.MaxRelayAttempts, MaxRelayAttemptsDefault)
	cfg.StopTimeout = cmp.Or(cfg.StopTimeout, StopTimeoutDefault)
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if cfg.DB == nil || cfg.Destination == nil {
		return nil, errors.New("outbox: Config.DB and Config.Destination are required")
	}
	if err := dialect.ValidateIdentifier(cfg.Topic); err != nil {
		return nil, fmt.Errorf("outbox: Config.Topic: %w", err)
	}
	if cfg.MaxRelayAttempts < 1 {
		return nil, fmt.Errorf("outbox: Config.MaxRelayAttempts %d: must be at least 1", cfg.MaxRelayAttempts)
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	schema, offsets, group, err := d.OutboxSchema(0)
	if err != nil {
		return nil, fmt.Errorf("outbox: on SQLite the bus sends after commit (docs/guarantees.md): %w", err)
	}
	o := &Outbox{cfg: cfg, d: d, schema: schema}
	sqlDB, err := cfg.DB.DB()
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	ackDeadline := cmp.Or(cfg.ackDeadline, 30*time.Second)
	o.sub, err = wsql.NewSubscriber(wsql.BeginnerFromStdSQL(sqlDB), wsql.SubscriberConfig{
		AckDeadline:    &ackDeadline,
		ConsumerGroup:  group,
		PollInterval:   cfg.PollInterval,
		ResendInterval: cfg.PollInterval,
		SchemaAdapter:  o.schema,
		OffsetsAdapter: offsets,
	}, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay subscriber: %w", err)
	}
	cfg.outageReminder = cmp.Or(cfg.outageReminder, outageReminderDefault)
	dest := &relayPublisher{cfg: cfg, attempts: map[string]int{}}
	o.relaySub = newStoppingSubscriber(o.sub, cfg.StopTimeout)
	// The router waits for its handler on Close: the stop's timeout, then
	// 30 s (Watermill's default) for a publish cut at its end to return.
	o.forwarder, err = forwarder.NewForwarder(o.relaySub, dest, relayLogger{cfg.Logger},
		forwarder.Config{ForwarderTopic: cfg.Topic, CloseTimeout: max(cfg.StopTimeout, 0) + 30*time.Second})
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: %w", err)
	}
	return o, nil
}

// Publish writes msgs for topic into the outbox through tx. They reach the
// broker after tx commits, and never if it rolls back.
func (o *Outbox) Publish(ctx context.Context, tx *gorm.DB, topic string, msgs ...*message.Message) error {
	sqlTx, ok := sqlTxOf(tx.Statement.ConnPool)
	if !ok {
		return ErrNoTransaction
	}
	pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(sqlTx), wsql.PublisherConfig{SchemaAdapter: o.schema}, o.cfg.Logger)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	for _, m := range msgs {
		m.SetContext(ctx)
		if o.cfg.Reach != "" {
			m.Metadata.Set(reachKey, o.cfg.Reach)
		}
	}
	if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: o.cfg.Topic}).Publish(topic, msgs...); err != nil {
		return fmt.Errorf("outbox: write to %s: %w", topic, err)
	}
	return nil
}

// sqlTxOf finds the *sql.Tx under a gorm pool, also inside gorm's
// prepared-statement wrapper.
func sqlTxOf(pool gorm.ConnPool) (*sql.Tx, bool) {
	switch p := pool.(type) {
	case *sql.Tx:
		return p, true
	case *gorm.PreparedStmtTX:
		tx, ok := p.Tx.(*sql.Tx)
		return tx, ok
	}
	return nil, false
}

// Run relays committed messages until ctx is done or Close is called (at
// once if Close came first), creating the outbox tables first if
// `postroom migrate` has not. When ctx ends, Run returns once the relay
// stopped, within Config.StopTimeout (see there).
func (o *Outbox) Run(ctx context.Context) error {
	if o.isClosed() {
		return nil
	}
	if err := o.cfg.DB.WithContext(ctx).Exec(o.d.OutboxTablesExist(o.cfg.Topic)).Error; err != nil {
		if err := o.sub.SubscribeInitialize(o.cfg.Topic); err != nil {
			return fmt.Errorf("outbox: create the outbox tables (or run `postroom migrate`): %w", err)
		}
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	ran := make(chan struct{})
	o.ran = ran
	o.mu.Unlock()
	defer close(ran)
	return o.forwarder.Run(ctx)
}

func (o *Outbox) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// Running is closed once the relay runs.
func (o *Outbox) Running() chan struct{} { return o.forwarder.Running() }

// Close stops the relay as Run's context ending does, and returns once it
// stopped. A router that never ran is not closed: it would wait its whole
// close timeout for handlers that never started.
func (o *Outbox) Close() error {
	o.mu.Lock()
	o.closed = true
	ran := o.ran
	o.mu.Unlock()
	var errs []error
	if ran != nil {
		select {
		case <-o.forwarder.Running():
			errs = append(errs, o.forwarder.Close())
		case <-ran:
		}
	}
	return errors.Join(append(errs, o.relaySub.Close())...)
}

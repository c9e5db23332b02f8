package bus

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/endpointname"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
)

// ErrorTopicDefault is the default Config.ErrorTopic.
const ErrorTopicDefault = "error"

// Defaults of Config; each field's comment gives its default.
const (
	concurrencyDefault      = 1
	inboxRetentionDefault   = 10 * 24 * time.Hour
	redeliveryWindowDefault = time.Hour
	cleanupIntervalDefault  = 12 * time.Hour
	cleanupBatchSizeDefault = 1000
	maxPayloadBytesDefault  = 1 << 20
	maxDeliveriesDefault    = 10
	stopTimeoutDefault      = 20 * time.Second
	// deliveryLimitMargin is how far a broker's delivery limit must lie
	// above MaxDeliveries: RabbitMQ 3.x counts consumer restarts too (see
	// docs/guarantees.md, "What is not guaranteed yet").
	deliveryLimitMargin       = 5
	gaugeIntervalDefault      = 5 * time.Second
	tableGaugeIntervalDefault = time.Minute
	maxRetriesDefault         = 3
	initialBackoffDefault     = 100 * time.Millisecond
	maxBackoffDefault         = 5 * time.Second
	backoffMultiplierDefault  = 2.0
)

// RetryPolicy says how often, and how far apart, a failing message is
// retried in process (NServiceBus's immediate retries); unrecoverable
// errors are not.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt. Defaults
	// to 3; set NoRetries for none.
	MaxRetries int
	// NoRetries turns retries off (MaxRetries 0 would mean the default).
	NoRetries bool
	// InitialBackoff is the wait before the first retry. Defaults to 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between retries. Defaults to 5s.
	MaxBackoff time.Duration
	// Multiplier grows the wait after each retry. Defaults to 2.
	Multiplier float64
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.NoRetries {
		p.MaxRetries = 0
	} else {
		p.MaxRetries = cmp.Or(p.MaxRetries, maxRetriesDefault)
	}
	p.InitialBackoff = cmp.Or(p.InitialBackoff, initialBackoffDefault)
	p.MaxBackoff = cmp.Or(p.MaxBackoff, maxBackoffDefault)
	p.Multiplier = cmp.Or(p.Multiplier, backoffMultiplierDefault)
	return p
}

// backoff returns the wait before retry n (1-based).
func (p RetryPolicy) backoff(n int) time.Duration {
	d := float64(p.InitialBackoff)
	for range n - 1 {
		d *= p.Multiplier
	}
	return min(time.Duration(d), p.MaxBackoff)
}

// Horizon is the longest time the retries of one delivery can take (with
// the defaults of the fields left unset).
func (p RetryPolicy) Horizon() time.Duration {
	p = p.withDefaults()
	var total time.Duration
	for n := 1; n <= p.MaxRetries; n++ {
		total += p.backoff(n)
	}
	return total
}

// Config configures a bus.
type Config struct {
	// Endpoint names this service; it names its queues and is the source of
	// the messages it sends. Required: 1 to 40 characters, each an ASCII
	// letter or digit, '-', '_' or '.', the first a letter or digit.
	Endpoint string
	// Transport carries the messages. Defaults to an in-memory gochannel
	// transport. New gives it the bus's Logger (transport.LoggerSetter): a
	// transport shared by several buses logs through the last one's.
	Transport transport.Transport
	// DB is the database of handlers' transactions, the inbox and the
	// watermarks, required by WithTransaction, WithInbox and WithStale.
	DB *gorm.DB
	// Logger logs the bus's work. Defaults to slog.Default().
	Logger *slog.Logger
	// Retry is the in-process retry policy. Defaults to 3 retries, 100ms doubling to 5s.
	Retry RetryPolicy
	// ErrorTopic receives messages that failed every attempt. Defaults to "error".
	ErrorTopic string
	// Concurrency is how many messages each handler handles at once, on
	// transports whose subscriptions compete (not the SQL transport, which
	// hands out one message of a handler at a time). Defaults to 1.
	Concurrency int
	// MaxPayloadBytes is the largest payload a handler accepts; a larger one
	// goes to the error topic unhandled. Defaults to 1 MiB.
	MaxPayloadBytes int
	// RateLimit waits out an outage of the database: see RateLimit. On by
	// default (10 consecutive transient failures, then one attempt a second).
	RateLimit RateLimit
	// DelayedRetries sends a message whose immediate retries ran out back to
	// its handler later, before the error topic. Needs DB with the delayed
	// table (`postroom migrate`). Defaults to none.
	DelayedRetries DelayedRetries
	// DelayedPollInterval is how often the bus looks for due delayed
	// messages (DeliverAt) when its database has their table. Defaults to 1s.
	DelayedPollInterval time.Duration
	// MaxDeliveries is how often a message may be delivered to a handler
	// without being settled (a nack, or a process that died handling it)
	// before the next delivery moves it to the error topic, so a poison
	// message stops blocking the messages behind it. How deliveries are
	// counted: docs/recoverability.md. Defaults to 10.
	MaxDeliveries int
	// StopTimeout is how long a stop (Run's context ending, or Close)
	// lets the messages being handled finish before their contexts are
	// cancelled (their transactions roll back, their messages go back to
	// the broker; the SQL transport's ack deadline can end them sooner); a
	// message waiting its turn is given back at once. Keep it below your
	// supervisor's grace period (30 s on Kubernetes). With Outbox the relay
	// gets as long again from its own stop, which with Close follows the
	// handlers' (outbox.Config.StopTimeout). Defaults to 20 s; negative:
	// cancel at once.
	StopTimeout time.Duration
	// Marshaler turns payloads into bytes. Defaults to JSON.
	Marshaler Marshaler
	// InboxRetention is how long inbox keys are kept. Defaults to 10 days.
	InboxRetention time.Duration
	// RedeliveryWindow is how long after a first delivery the broker may
	// still deliver the same message again (after a crash, a replay); with
	// the retry horizon, the shortest retention accepted. Defaults to 1 hour.
	RedeliveryWindow time.Duration
	// Middleware wraps every delivery, outside recoverability: it sees the
	// outcome the broker will get (nil: ack). For tracing, metrics, tests.
	Middleware []message.HandlerMiddleware
	// Outbox commits the messages a handler sends with its transaction and
	// relays them after commit (package outbox). Needs DB on PostgreSQL or
	// MySQL. Defaults to false: they are dispatched right after the commit,
	// and lost if the process dies in between.
	Outbox bool
	// Metrics is what the bus counts and serves for Prometheus.
	Metrics Metrics
	// Tracing turns on OpenTelemetry tracing.
	Tracing Tracing
	// Migrate applies postroom's migrations to DB when Run starts (as
	// `postroom migrate` does). Defaults to false: migrations are explicit.
	Migrate bool
	// Cleanup schedules CleanupStore, which purges inbox keys and watermarks
	// older than InboxRetention, once a handler uses the inbox or stale check.
	Cleanup CleanupSchedule
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// CleanupSchedule configures the scheduled CleanupStore (see handlers.Cleanup).
type CleanupSchedule struct {
	// Disabled turns the schedule off (purge some other way, or the tables grow forever).
	Disabled bool
	// Interval is how often it runs, on one instance per slot. Defaults to 12 hours.
	Interval time.Duration
	// BatchSize is the most rows one DELETE removes. Defaults to 1000.
	BatchSize int
	// Pause is the rest between two batches. Zero (the default) rests as
	// long as the batch took, so a large backlog is purged at half speed
	// and the handlers keep their latency; negative: no rest.
	Pause time.Duration
}

// RedeliveryHorizon returns how long after its first delivery a message
// can still arrive again with c's settings: its retries' horizon plus
// RedeliveryWindow, the least InboxRetention the bus accepts.
func (c Config) RedeliveryHorizon() time.Duration {
	c = c.withDefaults()
	return c.Retry.Horizon() + c.RedeliveryWindow
}

// Metrics configures what the bus counts and serves (Config.Metrics).
type Metrics struct {
	// Recorder counts what happens to messages. Defaults to a
	// *metrics.Counters, readable through Bus.Counters.
	Recorder metrics.Recorder
	// Addr serves the counters for Prometheus at /metrics on this address
	// while Run runs (":9464"; port 0 picks one, see Bus.MetricsAddr).
	// Without a host it listens on loopback only ("0.0.0.0:9464" serves
	// other machines). Needs the default Recorder. Defaults to "": off.
	Addr string
	// GaugeInterval is how often the bus sets its gauges. Defaults to 5s.
	GaugeInterval time.Duration
	// TableGaugeInterval is how often the bus sets the inbox and watermark
	// tables' gauges and the cleanup lag, when a handler uses them. Defaults
	// to one minute; negative turns them off.
	TableGaugeInterval time.Duration
}

// Tracing configures OpenTelemetry tracing (Config.Tracing).
type Tracing struct {
	// Provider turns tracing on: a consumer span per delivery (with its
	// retries), and the trace context carried in metadata. Pass
	// otel.GetTracerProvider() for the global one. Defaults to nil: off.
	Provider trace.TracerProvider
	// Propagator carries the trace context in metadata. Defaults to W3C's.
	Propagator propagation.TextMapPropagator
}

func (c Config) withDefaults() Config {
	c.ErrorTopic = cmp.Or(c.ErrorTopic, ErrorTopicDefault)
	c.Concurrency = cmp.Or(c.Concurrency, concurrencyDefault)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, maxPayloadBytesDefault)
	c.MaxDeliveries = cmp.Or(c.MaxDeliveries, maxDeliveriesDefault)
	c.StopTimeout = cmp.Or(c.StopTimeout, stopTimeoutDefault)
	c.Metrics.GaugeInterval = cmp.Or(c.Metrics.GaugeInterval, gaugeIntervalDefault)
	c.Metrics.TableGaugeInterval = cmp.Or(c.Metrics.TableGaugeInterval, tableGaugeIntervalDefault)
	c.InboxRetention = cmp.Or(c.InboxRetention, inboxRetentionDefault)
	c.RedeliveryWindow = cmp.Or(c.RedeliveryWindow, redeliveryWindowDefault)
	c.Retry = c.Retry.withDefaults()
	c.DelayedPollInterval = cmp.Or(c.DelayedPollInterval, delayedPollIntervalDefault)
	c.RateLimit.Threshold = cmp.Or(c.RateLimit.Threshold, rateLimitThresholdDefault)
	c.RateLimit.Wait = cmp.Or(c.RateLimit.Wait, rateLimitWaitDefault)
	c.RateLimit.MaxWait = cmp.Or(c.RateLimit.MaxWait, rateLimitMaxWaitDefault)
	c.Cleanup.Interval = cmp.Or(c.Cleanup.Interval, cleanupIntervalDefault)
	c.Cleanup.BatchSize = cmp.Or(c.Cleanup.BatchSize, cleanupBatchSizeDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Marshaler == nil {
		c.Marshaler = JSON{}
	}
	if c.Metrics.Recorder == nil {
		c.Metrics.Recorder = &metrics.Counters{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if !endpointname.Valid(c.Endpoint) {
		errs = append(errs, fmt.Errorf("bus: Config.Endpoint %q: use 1 to 40 letters, digits, '-', '_' or '.', starting with a letter or digit", c.Endpoint))
	}
	if !topicName.MatchString(c.ErrorTopic) {
		errs = append(errs, fmt.Errorf("bus: Config.ErrorTopic %q: use letters, digits, '-', '_' or '.'", c.ErrorTopic))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("bus: Config.Concurrency %d: must be at least 1", c.Concurrency))
	}
	if c.RateLimit.Threshold < 1 || c.RateLimit.Wait < 0 {
		errs = append(errs, fmt.Errorf("bus: Config.RateLimit: Threshold %d must be at least 1 and Wait %s not negative", c.RateLimit.Threshold, c.RateLimit.Wait))
	}
	if c.MaxDeliveries < 1 {
		errs = append(errs, fmt.Errorf("bus: Config.MaxDeliveries %d: must be at least 1", c.MaxDeliveries))
	}
	if limit := deliveryLimit(c.Transport); limit > 0 && limit < c.MaxDeliveries+deliveryLimitMargin {
		errs = append(errs, fmt.Errorf("bus: the transport's delivery limit %d is not above Config.MaxDeliveries %d by %d: "+
			"the broker would drop a message that keeps failing, without a trace, before the bus moves it to the error topic "+
			"(RabbitMQ also counts a channel closed at each restart); raise the limit (amqp.Config.DeliveryLimit) to %d or more, or lower MaxDeliveries",
			limit, c.MaxDeliveries, deliveryLimitMargin, c.MaxDeliveries+deliveryLimitMargin))
	}
	if c.Retry.MaxRetries < 0 || c.Retry.InitialBackoff < 0 || c.Retry.MaxBackoff < 0 || c.Retry.Multiplier < 1 {
		errs = append(errs, errors.New("bus: Config.Retry: retries and backoffs must not be negative and the multiplier at least 1"))
	}
	if c.RedeliveryWindow < 0 { // it would shorten the horizon the inbox retention is checked against
		errs = append(errs, fmt.Errorf("bus: Config.RedeliveryWindow %s is negative", c.RedeliveryWindow))
	}
	// Negative values would panic a ticker or fail with a confusing error.
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"DelayedPollInterval", c.DelayedPollInterval}, {"Metrics.GaugeInterval", c.Metrics.GaugeInterval}, {"InboxRetention", c.InboxRetention},
		{"RateLimit.MaxWait", c.RateLimit.MaxWait}, {"Cleanup.Interval", c.Cleanup.Interval},
	} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("bus: Config.%s %s is negative: set a positive duration, or 0 for the default", d.name, d.d))
		}
	}
	for _, n := range []struct {
		name string
		n    int
	}{{"MaxPayloadBytes", c.MaxPayloadBytes}, {"Cleanup.BatchSize", c.Cleanup.BatchSize}} {
		if n.n < 0 {
			errs = append(errs, fmt.Errorf("bus: Config.%s %d is negative: set a positive size, or 0 for the default", n.name, n.n))
		}
	}
	for _, d := range c.DelayedRetries.Delays {
		if d < 0 {
			errs = append(errs, fmt.Errorf("bus: Config.DelayedRetries: delay %s is negative", d))
		}
	}
	return errors.Join(errs...)
}

// deliveryLimit is tr's broker-side delivery limit, 0 for none.
func deliveryLimit(tr transport.Transport) int {
	if tr == nil {
		return 0
	}
	return tr.Capabilities().DeliveryLimit
}

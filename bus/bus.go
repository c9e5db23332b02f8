package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/drain"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/tracing"
	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/scheduler"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
)

// Bus is one endpoint: its handlers, its router and its transport.
type Bus struct {
	cfg      Config
	router   *message.Router
	wmSink   *logsink.Sink // wmLog's: told when the bus begins to stop
	wmLog    watermill.LoggerAdapter
	outbox   *outbox.Outbox
	registry *prometheus.Registry // Watermill's router metrics; nil without Metrics.Addr
	// The poison-loop guard's counts (counterFor); redeliveries nil without DB.
	nacks        nackCount
	redeliveries *poisonCount
	// drain counts the deliveries the handlers hold (drainingSubscriber
	// waits for them) and is cut Config.StopTimeout into a stop, cancelling
	// the handlers still running.
	drain    *drain.Drain
	stopping <-chan struct{} // closed when the stop begins

	mu         sync.Mutex
	handlers   map[string]bool
	running    bool
	routerRan  bool          // Run started the router: Close must stop it
	routerDone chan struct{} // closed when the router's Run returned
	// retryTargets runs a delayed retry, by handler group.
	retryTargets       map[string]func(topic string, msg *message.Message) error
	retryDelays        map[string][]time.Duration // per handler, from WithDelayedRetries
	delayedAttempts    map[int64]int              // refused publishes of due delayed messages, by row
	delayedReady       bool                       // the database has the delayed table (checked at Run)
	closed             bool
	runCtx             context.Context // the context of the Run that started the router
	needsCleanup       bool
	errorQueueDeclared bool // by a Run: the next one does not declare it again
	// One error-queue subscriber per bus (each holds a connection), used
	// under errorQueueMu.
	errorQueueMu  sync.Mutex
	errorQueueSub message.Subscriber
	// opened: the subscribers Close closes (the transport if ownsTransport).
	opened        []io.Closer
	ownsTransport bool
	cleanup       *scheduler.Scheduler // built by the first Run that needs it
	metricsAddr   string
}

// New returns a bus; register handlers with Handle, then call Run.
func New(cfg Config) (*Bus, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Migrate && cfg.DB == nil {
		return nil, errors.New("bus: Config.Migrate needs Config.DB")
	}
	if len(cfg.DelayedRetries.Delays) > 0 && cfg.DB == nil {
		return nil, errors.New("bus: Config.DelayedRetries needs Config.DB: delayed retries wait in the database")
	}
	ownsTransport := cfg.Transport == nil
	if ownsTransport {
		cfg.Transport = gochannel.New(gochannel.Config{})
	}
	if ls, ok := cfg.Transport.(transport.LoggerSetter); ok {
		ls.SetLogger(cfg.Logger)
	}
	wmSink, wmLog := watermillLogger(cfg.Logger)
	// On Close: the drain, then 30 s for a cancelled attempt to roll back.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: max(cfg.StopTimeout, 0) + 30*time.Second}, wmLog)
	if err != nil {
		return nil, fmt.Errorf("bus: router: %w", err)
	}
	b := &Bus{cfg: cfg, router: router, wmSink: wmSink, wmLog: wmLog, handlers: map[string]bool{},
		retryTargets: map[string]func(string, *message.Message) error{}, retryDelays: map[string][]time.Duration{},
		delayedAttempts: map[int64]int{}, ownsTransport: ownsTransport}
	b.drain = drain.New(cfg.StopTimeout)
	b.stopping = b.drain.Stopping()
	if b.redeliveries, err = newPoisonCount(cfg.DB, cfg.Now, b.stopping); err != nil {
		return nil, err
	}
	if cfg.Metrics.Addr != "" {
		b.addRouterMetrics()
	}
	if cfg.Tracing.Provider != nil {
		if _, err = tracing.New(tracing.Config{TracerProvider: cfg.Tracing.Provider}); err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
	}
	if cfg.Outbox {
		if cfg.DB == nil {
			return nil, errors.New("bus: Config.Outbox needs Config.DB (PostgreSQL or MySQL)")
		}
		ocfg := outbox.Config{DB: cfg.DB, Destination: cfg.Transport.Publisher(), Reach: b.outboxReach(), Logger: wmLog, ErrorTopic: cfg.ErrorTopic,
			StopTimeout: cfg.StopTimeout, OnMovedAside: func(string, *message.Message, error) { cfg.Metrics.Recorder.Record(outboxRelay, metrics.Failed) }}
		if m, ok := cfg.Transport.(transport.Mandatory); ok {
			ocfg.PublishCommand = func(topic string, msg *message.Message) error { return m.PublishMandatory(topic, msg) }
		}
		b.outbox, err = outbox.New(ocfg)
		if err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		b.needsCleanup = true // relayed outbox rows are purged with the inbox
	}
	return b, nil
}

// outboxRelay names the outbox relay in the counters (Failed: moved aside).
const outboxRelay = "postroom.outbox-relay"

// Endpoint returns the endpoint's name.
func (b *Bus) Endpoint() string { return b.cfg.Endpoint }

// DB returns the configured database, or nil.
func (b *Bus) DB() *gorm.DB { return b.cfg.DB }

// Transport returns the transport.
func (b *Bus) Transport() transport.Transport { return b.cfg.Transport }

// Counters returns the in-memory counters when Config.Metrics.Recorder was left
// unset (or is a *metrics.Counters), else nil.
func (b *Bus) Counters() *metrics.Counters {
	c, _ := b.cfg.Metrics.Recorder.(*metrics.Counters)
	return c
}

// Run handles messages until ctx is done or Close is called, or until a
// task it runs beside the handlers (the outbox's relay, the scheduler, …)
// fails: then it logs the failure, stops, and returns the error.
func (b *Bus) Run(ctx context.Context) error {
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return errors.New("bus: Run called after Close")
	case b.running:
		b.mu.Unlock()
		return errors.New("bus: Run called twice")
	}
	// Set under the check's lock, so a racing Run or Handle sees it; a Run
	// that fails before the router starts clears it.
	b.running = true
	cleanup := b.needsCleanup && !b.cfg.Cleanup.Disabled
	b.mu.Unlock()
	started := false
	defer func() {
		if !started {
			b.mu.Lock()
			b.running = false
			b.mu.Unlock()
		}
	}()
	if b.cfg.Migrate {
		if _, err := store.Migrate(ctx, b.cfg.DB, store.Tables{}); err != nil {
			return fmt.Errorf("bus: %w", err)
		}
	}
	if err := b.declareErrorQueue(); err != nil {
		return err
	}
	if b.cfg.DB != nil {
		if err := store.CheckFoundRows(ctx, b.cfg.DB); err != nil {
			return fmt.Errorf("bus: %w", err)
		}
		if err := store.CheckTimeZone(ctx, b.cfg.DB); err != nil {
			return fmt.Errorf("bus: %w", err)
		}
		if warning := storeinfo.PoolWarning(b.cfg.DB); warning != "" {
			b.cfg.Logger.WarnContext(ctx, "bus: "+warning)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var background []func() error
	if b.outbox != nil {
		background = append(background, func() error { return b.outbox.Run(ctx) })
		if gauges, ok := b.cfg.Metrics.Recorder.(metrics.GaugeSetter); ok {
			background = append(background, func() error { b.reportOutbox(ctx, gauges); return nil })
		}
	}
	if b.cfg.DB != nil && b.delayedTableExists(ctx) {
		b.mu.Lock()
		b.delayedReady = true
		b.mu.Unlock()
		background = append(background, func() error { return b.relayDelayed(ctx) })
	} else if b.wantsDelayedRetries() {
		return errors.New("bus: delayed retries are configured, but the database has no delayed table: run `postroom migrate`")
	}
	if gauges, ok := b.cfg.Metrics.Recorder.(metrics.GaugeSetter); ok {
		if c, ok := b.cfg.Transport.(transport.Connectivity); ok {
			background = append(background, func() error { reportConnected(ctx, b.cfg.Metrics.GaugeInterval, c, gauges); return nil })
		}
	}
	if gauges, ok := b.cfg.Metrics.Recorder.(metrics.GaugeSetter); ok && b.needsTables() && b.cfg.Metrics.TableGaugeInterval > 0 {
		background = append(background, func() error { b.reportTables(ctx, gauges); return nil })
	}
	var sched *scheduler.Scheduler
	if cleanup {
		var err error
		if sched, err = b.scheduleCleanup(); err != nil {
			return err
		}
		if err := sched.Define(ctx); err != nil {
			return startupError(ctx, err)
		}
	}
	if sched != nil {
		background = append(background, func() error { return sched.Run(ctx) })
	}
	b.mu.Lock()
	closed := b.closed
	b.routerRan = !closed
	routerDone := make(chan struct{})
	if !closed {
		b.runCtx = ctx
		b.routerDone = routerDone
		context.AfterFunc(ctx, b.beginStop)
	}
	b.mu.Unlock()
	if closed {
		return errors.New("bus: closed while Run was starting")
	}
	if b.cfg.Metrics.Addr != "" {
		serve, err := b.serveMetrics(ctx)
		if err != nil {
			b.mu.Lock()
			b.routerRan = false
			b.mu.Unlock()
			close(routerDone) // a Close that saw routerRan waits on it
			return err
		}
		background = append(background, serve)
	}
	started = true
	b.logRunning(ctx)
	done := b.startBackground(ctx, cancel, background)
	// Watermill stops a router on Close, not on its context: a subscription
	// that misses the cancel would keep Run waiting forever.
	go func() {
		<-ctx.Done()
		_ = b.closeRouter(routerDone)
	}()
	errs := []error{b.router.Run(ctx)}
	close(routerDone)
	if ctx.Err() != nil && errors.Is(errs[0], context.Canceled) {
		errs[0] = nil // stopped while a subscription was still starting
	}
	cancel()
	for range background {
		// Stopped by the cancel above (perhaps still starting): not an error.
		if err := <-done; !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startupError is err of a step of Run that reads postroom's tables, with
// a hint to migrate unless Run was stopped meanwhile.
func startupError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("bus: stopped while starting: %w", err)
	}
	if dialect.Contention(err) { // not the schema: instances starting together, again and again
		return fmt.Errorf("bus: %w (lost to other instances starting at once, several times: start it again)", err)
	}
	return fmt.Errorf("bus: %w (has `postroom migrate` run?)", err)
}

// serveMetrics listens on Config.Metrics.Addr and returns the server's loop.
func (b *Bus) serveMetrics(ctx context.Context) (func() error, error) {
	counters := b.Counters()
	if counters == nil {
		return nil, errors.New("bus: Config.Metrics.Addr needs the default Recorder (*metrics.Counters)")
	}
	ln, err := net.Listen("tcp", loopbackByDefault(b.cfg.Metrics.Addr))
	if err != nil {
		return nil, fmt.Errorf("bus: metrics: %w", err)
	}
	b.mu.Lock()
	b.metricsAddr = ln.Addr().String()
	b.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("/metrics", b.metricsHandler(counters))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return func() error {
		go func() { <-ctx.Done(); _ = srv.Close() }()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
}

// MetricsAddr is the address /metrics is served on while Run runs, or "".
func (b *Bus) MetricsAddr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.metricsAddr
}

// declareErrorQueue makes the error topic durable before anything fails (on
// RabbitMQ a message to an exchange with no queue is dropped): once per
// bus, and again after the queue was found gone (moveToErrorTopic).
func (b *Bus) declareErrorQueue() error {
	b.errorQueueMu.Lock()
	defer b.errorQueueMu.Unlock()
	b.mu.Lock()
	declared := b.errorQueueDeclared
	b.mu.Unlock()
	if declared {
		return nil
	}
	if b.errorQueueSub == nil {
		sub, err := b.cfg.Transport.Subscriber(transport.ErrorQueueGroup, 1)
		if err != nil {
			return fmt.Errorf("bus: error queue: %w", err)
		}
		b.errorQueueSub = sub
		b.mu.Lock()
		b.opened = append(b.opened, sub)
		b.mu.Unlock()
	}
	if init, ok := b.errorQueueSub.(message.SubscribeInitializer); ok {
		if err := init.SubscribeInitialize(b.cfg.ErrorTopic); err != nil {
			return fmt.Errorf("bus: declare the error queue: %w", err)
		}
	}
	b.mu.Lock()
	b.errorQueueDeclared = true
	b.mu.Unlock()
	return nil
}

// Running is closed once every handler has subscribed. It is never closed
// when Run fails before that: wait on it together with Run's result, e.g.
//
//	select { case <-b.Running(): case err := <-done: return err }
func (b *Bus) Running() <-chan struct{} { return b.router.Running() }

// startBackground runs each task beside the router; the channel gets each
// one's result. A task that fails while ctx is live stops the bus, so Run
// returns its error rather than run on without, say, the outbox's relay.
func (b *Bus) startBackground(ctx context.Context, cancel context.CancelFunc, tasks []func() error) <-chan error {
	done := make(chan error, len(tasks))
	for _, run := range tasks {
		go func() {
			err := run()
			if err != nil && ctx.Err() == nil && !b.isStopping() && !errors.Is(err, context.Canceled) {
				b.cfg.Logger.Error("bus: a background task failed; the bus stops", "error", err)
				cancel()
			}
			done <- err
		}()
	}
	return done
}

// isStopping reports whether the bus has begun to stop (Close, or the end
// of Run's context, every message's ancestor). Only a stop, not any ended
// message context, gives a failed message back instead of the error topic.
func (b *Bus) isStopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed || b.runCtx != nil && b.runCtx.Err() != nil
}

// Close stops handling and closes the subscribers the bus opened, after
// the handlers still running finish, within Config.StopTimeout (then their
// messages go back to the broker, or are parked per Inbox.ExternalEffects).
// A transport passed in Config.Transport stays open: close it after every
// bus that uses it.
func (b *Bus) Close() error {
	b.beginStop()
	b.mu.Lock()
	b.closed = true
	ran, routerDone := b.routerRan, b.routerDone
	b.mu.Unlock()
	var errs []error
	if ran {
		errs = append(errs, b.closeRouter(routerDone))
	}
	// A delayed retry runs beside the router, from the database: it gets
	// the same drain before the transport it sends on is closed.
	b.awaitHandling()
	if b.outbox != nil {
		errs = append(errs, b.outbox.Close())
	}
	b.mu.Lock()
	opened := b.opened
	b.opened = nil
	b.mu.Unlock()
	for _, sub := range opened {
		errs = append(errs, sub.Close())
	}
	if b.ownsTransport {
		errs = append(errs, b.cfg.Transport.Close())
	}
	return errors.Join(errs...)
}

// closeRouter closes the router once it runs; one that never ran is left
// alone, as Watermill's Close would wait its whole close timeout for it.
func (b *Bus) closeRouter(done <-chan struct{}) error {
	select {
	case <-b.router.Running():
		return b.router.Close()
	case <-done:
		return nil
	}
}

// MessageID returns the ID of the message being handled, or "" outside a
// handler. It is stable across redeliveries: pass it as the idempotency key
// of a call to an external system.
func MessageID(ctx context.Context) string {
	if in := incomingFrom(ctx); in != nil {
		return in.msg.UUID
	}
	return ""
}

// MessageIDs returns the IDs of the messages a batch handler (HandleBatch)
// was called with, in the order of its slice; in any other handler, the
// one message's ID; nil outside a handler.
func MessageIDs(ctx context.Context) []string {
	if ids, ok := ctx.Value(batchIDsKey{}).([]string); ok {
		return ids
	}
	if id := MessageID(ctx); id != "" {
		return []string{id}
	}
	return nil
}

// Metadata returns the metadata of the message being handled, or nil.
func Metadata(ctx context.Context) map[string]string {
	if in := incomingFrom(ctx); in != nil {
		return in.msg.Metadata
	}
	return nil
}

// ErrNoOutbox is returned by OutboxBacklog when Config.Outbox is off.
var ErrNoOutbox = errors.New("bus: no outbox: set Config.Outbox")

// reportConnected sets the transport's connected gauge until ctx is done.
func reportConnected(ctx context.Context, interval time.Duration, c transport.Connectivity, gauges metrics.GaugeSetter) {
	every(ctx, interval, func() {
		connected := 0.0
		if c.Connected() {
			connected = 1
		}
		gauges.SetGauge(metrics.Gauge(metricseries.TransportConnected), connected)
	})
}

// reportOutbox sets the outbox backlog and lag gauges until ctx is done.
func (b *Bus) reportOutbox(ctx context.Context, gauges metrics.GaugeSetter) {
	every(ctx, b.cfg.Metrics.GaugeInterval, func() {
		if backlog, err := b.outbox.Backlog(ctx); err == nil {
			gauges.SetGauge(metrics.Gauge(metricseries.OutboxBacklog), float64(backlog.Messages))
			gauges.SetGauge(metrics.Gauge(metricseries.OutboxLagSeconds), backlog.Lag.Seconds())
		} else if ctx.Err() == nil {
			b.cfg.Logger.Warn("bus: outbox backlog", "error", err)
			gauges.SetGauge(metrics.Gauge(metricseries.OutboxBacklog), metrics.Unknown)
			gauges.SetGauge(metrics.Gauge(metricseries.OutboxLagSeconds), metrics.Unknown)
		}
	})
}

// OutboxBacklog reports the messages committed to the outbox and not yet
// relayed, and the age of the oldest, for a gauge or an alert.
func (b *Bus) OutboxBacklog(ctx context.Context) (outbox.Backlog, error) {
	if b.outbox == nil {
		return outbox.Backlog{}, ErrNoOutbox
	}
	return b.outbox.Backlog(ctx)
}

// logRunning says at info what the bus runs on, so that a service that
// fell back to the embedded defaults says so.
func (b *Bus) logRunning(ctx context.Context) {
	db := "none (no inbox, stale check, outbox or delayed delivery)"
	if b.cfg.DB != nil {
		if d, err := dialects.Of(b.cfg.DB); err == nil {
			db = d.String()
		}
	}
	b.mu.Lock()
	handlers := len(b.handlers)
	b.mu.Unlock()
	b.cfg.Logger.InfoContext(ctx, "bus: running", "endpoint", b.cfg.Endpoint, "store", db,
		"transport", cmp.Or(b.cfg.Transport.Capabilities().Reach, "in this process"), "handlers", handlers)
}

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
	"github.com/postroom/postroom/internal/drain"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/uow"
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
	cfg    Config
	router *message.Router
	wmSink *logsink.Sink // wmLog's: told when the bus begins to stop
	wmLog  watermill.LoggerAdapter
	outbox *outbox.Outbox
	// registry holds Watermill's router metrics, served with postroom's on
	// Metrics.Addr; nil without it.
	registry *prometheus.Registry
	// unsettled counts the deliveries nacked, for the poison-loop guard.
	unsettled unsettled
	// redeliveries counts, in the database, the redeliveries the
	// transport did not count; nil without Config.DB.
	redeliveries *redeliveries
	// suspects holds the one redelivery the broker may have handed out
	// after a crash that is being counted and handled (guarded).
	suspects chan struct{}
	// drain counts the deliveries the handlers hold (drainingSubscriber
	// waits for them) and is cut Config.StopTimeout after the bus began to
	// stop: then the handlers still running have their context cancelled.
	drain    *drain.Drain
	stopping <-chan struct{} // closed when the stop begins

	mu        sync.Mutex
	handlers  map[string]bool
	running   bool
	routerRan bool // Run started the router: Close must stop it
	// routerDone is closed when the router's Run returned (set with routerRan).
	routerDone chan struct{}
	// retryTargets runs a delayed retry of a handler group's message.
	retryTargets map[string]func(topic string, msg *message.Message) error
	retryDelays  map[string][]time.Duration // per handler, from WithDelayedRetries
	// delayedAttempts counts the refused publishes of due delayed messages, by row.
	delayedAttempts    map[int64]int
	delayedReady       bool // the database has the delayed table (checked at Run)
	closed             bool
	runCtx             context.Context // the context of the Run that started the router
	needsCleanup       bool
	errorQueueDeclared bool // by a Run: the next one does not declare it again
	// errorQueue declares the error queue: one subscriber per bus, opened
	// by the first declaration (each would hold a connection until the
	// transport closes), used one declaration at a time.
	errorQueueMu  sync.Mutex
	errorQueueSub message.Subscriber
	// opened holds the subscribers the bus opened (its handlers' and its
	// error queue's): Close closes them, not the transport, unless the bus
	// created the transport itself (ownsTransport).
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
	// The router waits for its handlers on Close: the drain, then 30 s
	// for an attempt cancelled at its end to roll back.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: max(cfg.StopTimeout, 0) + 30*time.Second}, wmLog)
	if err != nil {
		return nil, fmt.Errorf("bus: router: %w", err)
	}
	b := &Bus{cfg: cfg, router: router, wmSink: wmSink, wmLog: wmLog, handlers: map[string]bool{},
		retryTargets: map[string]func(string, *message.Message) error{}, retryDelays: map[string][]time.Duration{},
		delayedAttempts: map[int64]int{}, ownsTransport: ownsTransport}
	b.drain = drain.New(cfg.StopTimeout)
	b.stopping = b.drain.Stopping()
	b.suspects = make(chan struct{}, 1)
	if b.redeliveries, err = newRedeliveries(cfg.DB); err != nil {
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

// outboxRelay names the outbox relay in the counters: its Failed count is
// the messages it moved to the error topic.
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
// task it runs beside the handlers (the outbox's relay, the delayed
// relay, the scheduler, the metrics server) fails: then it logs the
// failure at error, stops, and returns the error.
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
	// Marked under the same lock as the check: a second Run, or a Handle,
	// racing this one sees it. A Run that fails before the router starts
	// clears it, so it can be called again.
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
		if warning := store.SQLiteCommitWarning(b.cfg.DB); warning != "" {
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
	// Watermill stops a router on Close, not on its context: a
	// subscription that misses the cancel (watermill-amqp's own
	// Subscriber can, in its reconnect loop) would keep Run waiting
	// forever.
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

// startupError is err of a step of Run that reads postroom's tables: with
// a hint to migrate, unless Run was stopped while it started (then the
// tables are not the cause).
func startupError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("bus: stopped while starting: %w", err)
	}
	if dialect.Contention(err) { // not the schema: instances starting together, again and again
		return fmt.Errorf("bus: %w (lost to other instances starting at once, several times: start it again)", err)
	}
	return fmt.Errorf("bus: %w (has `postroom migrate` run?)", err)
}

// serveMetrics listens on Config.Metrics.Addr and returns the function that
// serves /metrics until ctx is done.
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

// declareErrorQueue makes the error topic durable before anything fails: on
// RabbitMQ a message published to an exchange with no queue bound is dropped.
//
// Once per bus, but again after the queue was found gone (moveToErrorTopic):
// a Run that failed and is called again does not declare it again, and no
// declaration opens another subscriber (each would hold a connection
// until the transport closes: one per failed message while the queue is
// gone).
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

// startBackground runs each task beside the router; the channel gets
// each one's result. A task that fails while ctx is live (the outbox's
// relay, the delayed relay, the scheduler, the metrics server) is logged
// at error and stops the bus (cancel), so that Run returns its error:
// running on without it would, say, leave every sent message in the
// outbox without a word. NServiceBus stops an endpoint on such a critical
// error too.
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

// isStopping reports whether the bus has begun to stop. A message's
// context can also end for other reasons (the SQL transport's ack
// deadline, a Middleware's timeout); only a stop makes the bus give a
// failed message back instead of moving it to the error topic. The bus
// stops when Close is called or when the context of the Run that started
// the router ends; that context is an ancestor of every message's, so
// when a message's context ended with it, it has ended already.
func (b *Bus) isStopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed || b.runCtx != nil && b.runCtx.Err() != nil
}

// Close stops handling and closes the subscribers the bus opened. It
// takes no new message and waits for the handlers still running: for
// Config.StopTimeout they finish as usual; then their context is
// cancelled, an attempt in progress rolls back, and its message goes back
// to the broker (not to the error topic, unless a handler
// Inbox.ExternalEffects parks it), to be handled again.
//
// A transport passed in Config.Transport stays open: close it after every
// bus that uses it. The in-memory transport the bus made for itself, when
// Config.Transport was nil, is closed.
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
	// The router waits for the deliveries from the broker; a delayed retry
	// runs beside it, from the database, and may still be running: it
	// gets the same drain before the transport it sends on is closed, so
	// that Close does not return while it runs.
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

// closeRouter closes the router once it runs. A router whose Run returned
// without running (a subscribe failed) or that Run never started is left
// alone: Watermill's Close would wait its whole close timeout (30 s) for
// handlers that never started.
func (b *Bus) closeRouter(done <-chan struct{}) error {
	select {
	case <-b.router.Running():
		return b.router.Close()
	case <-done:
		return nil
	}
}

// Tx returns the database transaction of the message being handled, for
// the handler's business writes; they commit with the inbox key and the
// watermark, or not at all. It is nil outside a transactional handler.
func Tx(ctx context.Context) *gorm.DB { return uow.Tx(ctx) }

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

// reportConnected sets the transport's connected gauge every interval
// until ctx is done.
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

// logRunning says at info what the bus runs on: its endpoint, its store
// (none, or the database's kind) and where its transport publishes, so
// that a service that fell back to the embedded defaults says so.
func (b *Bus) logRunning(ctx context.Context) {
	db := "none (no inbox, stale check, outbox or delayed delivery)"
	if b.cfg.DB != nil {
		if d, err := dialect.Of(b.cfg.DB); err == nil {
			db = string(d)
		}
	}
	b.mu.Lock()
	handlers := len(b.handlers)
	b.mu.Unlock()
	b.cfg.Logger.InfoContext(ctx, "bus: running", "endpoint", b.cfg.Endpoint, "store", db,
		"transport", cmp.Or(b.cfg.Transport.Capabilities().Reach, "in this process"), "handlers", handlers)
}

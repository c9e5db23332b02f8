package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/middleware/tracing"
	"github.com/postroom/postroom/transport"
)

// HandlerOption configures one handler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	name         string
	messageName  string // of the message type it handles
	transaction  bool
	inbox        bool
	inboxKey     inbox.KeyFunc
	inboxConfigs int // the Inbox values WithInbox was given: at most one
	stale        bool
	version      stale.VersionFunc
	staleConfigs int // the versions WithStale was given: at most one
	concurrency  int
	external     *ExternalEffects
	checksum     bool
	payload      bool
	delays       *[]time.Duration // nil: Config.DelayedRetries
	batched      bool             // WithBatch was given
	batchSize    int              // 0: a transaction per message
	batchWait    time.Duration
	inFlight     func() int   // the handler's deliveries being handled
	onSettle     func(func()) // sets what runs each time one of them is done
}

// Named names the handler (by default its message's name): two handlers of
// one type need distinct names. It names the inbox's consumer: keep it stable.
func Named(name string) HandlerOption { return func(c *handlerConfig) { c.name = name } }

// WithTransaction runs the handler in a database transaction that
// unitofwork.Tx(ctx) returns; it commits when the handler returns nil.
func WithTransaction() HandlerOption { return func(c *handlerConfig) { c.transaction = true } }

// WithInbox makes the handler's effects happen once per message: the inbox
// key commits with the handler's transaction, and a duplicate is acked
// without calling the handler. Implies WithTransaction. The key defaults to
// the message's ID and source endpoint; at most one Inbox may be given.
func WithInbox(in ...Inbox) HandlerOption {
	return func(c *handlerConfig) {
		c.inbox = true
		c.inboxConfigs += len(in)
		if len(in) == 0 {
			return
		}
		i := in[len(in)-1]
		c.inboxKey = i.Key
		c.checksum, c.payload = i.MessageLog || i.StorePayload, i.StorePayload
		if i.ExternalEffects != nil {
			e := *i.ExternalEffects
			c.external = &e
		}
	}
}

// Inbox configures WithInbox. Its zero value is the inbox of WithInbox().
type Inbox struct {
	// Key takes the key from the message (for EDI, inbox/edi). nil: the
	// message's ID and source endpoint.
	Key inbox.KeyFunc
	// MessageLog records a checksum of each payload with its key: a reused
	// key with another payload goes to the error topic, not skipped.
	MessageLog bool
	// StorePayload keeps the payload with the key too (implies MessageLog).
	StorePayload bool
	// ExternalEffects selects the External mode (docs/effects.md): the key
	// is claimed before the handler runs, which passes
	// inbox.IdempotencyKey(ctx) on. Return inbox.NotDone(err) when the
	// effect certainly did not happen.
	ExternalEffects *ExternalEffects
}

// ExternalEffects configures a handler whose effects no transaction
// covers (an HTTP call, a file, an e-mail): Inbox.ExternalEffects.
type ExternalEffects struct {
	// OnUnknown decides what follows an attempt that ended without a known
	// outcome: inbox.Park (the error topic) or inbox.Retry (run again with
	// the same inbox.IdempotencyKey). Defaults to inbox.Park.
	OnUnknown inbox.Policy
	// Lease is how long an attempt holds its claim; the handler's context
	// ends with it. Defaults to inbox.LeaseDefault (one minute).
	Lease time.Duration
}

// WithStale drops an update older than one already applied to the same
// entity. Implies WithTransaction. The version comes from WithVersion's
// metadata, or from version when given (at most one, for foreign producers).
func WithStale(version ...stale.VersionFunc) HandlerOption {
	return func(c *handlerConfig) {
		c.stale = true
		c.staleConfigs += len(version)
		if len(version) > 0 {
			c.version = version[len(version)-1]
		}
	}
}

// WithDelayedRetries overrides Config.DelayedRetries for this handler: the
// delays before each delayed retry, none for no delayed retries.
func WithDelayedRetries(delays ...time.Duration) HandlerOption {
	return func(c *handlerConfig) { c.delays = &delays }
}

// WithBatch commits the handler's messages in batches: up to size messages
// handled at the same time share one transaction, each in a savepoint of
// its own (a failing one is retried alone), and are acked once it commits,
// at size messages or maxWait after the first (10ms when 0).
// Config.Concurrency becomes the number of batches in flight. Implies
// WithTransaction; not with Inbox.ExternalEffects. See docs/batching.md.
func WithBatch(size int, maxWait time.Duration) HandlerOption {
	return func(c *handlerConfig) { c.transaction, c.batched, c.batchSize, c.batchWait = true, true, size, maxWait }
}

// WithConcurrency overrides Config.Concurrency for this handler: at least 1.
func WithConcurrency(n int) HandlerOption { return func(c *handlerConfig) { c.concurrency = n } }

// HandlerFunc handles one message of type T; an error rolls back and retries.
type HandlerFunc[T any] func(ctx context.Context, m *T) error

// Handle registers fn for messages of type T: commands sent to this
// endpoint and events published by anyone. Call it before Run.
func Handle[T any](b *Bus, fn HandlerFunc[T], opts ...HandlerOption) error {
	if b == nil || fn == nil {
		return fmt.Errorf("bus: Handle of %s: the bus and the handler function must not be nil", MessageName[T]())
	}
	return handle(b, fn, false, opts...)
}

// handle registers fn; byRun is true for the bus's own handlers, from Run.
func handle[T any](b *Bus, fn HandlerFunc[T], byRun bool, opts ...HandlerOption) error {
	return b.register(MessageName[T](), byRun, opts, func(hc handlerConfig) (message.HandlerFunc, error) {
		h, err := b.chain(hc, typed(fn))
		if err != nil {
			return nil, err
		}
		return decoded[T](b, h), nil
	})
}

// register subscribes the handler that build returns for its configuration.
func (b *Bus) register(name string, byRun bool, opts []HandlerOption, build func(handlerConfig) (message.HandlerFunc, error)) error {
	hc := handlerConfig{name: name, messageName: name, concurrency: b.cfg.Concurrency}
	for _, o := range opts {
		o(&hc)
	}
	if err := hc.validate(); err != nil {
		return err
	}
	caps := b.cfg.Transport.Capabilities()
	if caps.Sequential && hc.batchSize > 1 {
		b.cfg.Logger.Info("bus: the transport hands out one message of a handler at a time: WithBatch commits each message alone", "handler", hc.name)
		hc.batchSize, hc.batchWait = 1, 0
	}
	if err := b.reserve(hc.name, byRun); err != nil {
		return err
	}
	registered := false
	defer func() {
		if !registered { // a failed Handle can be called again
			b.mu.Lock()
			delete(b.handlers, hc.name)
			b.mu.Unlock()
		}
	}()
	var inFlight atomic.Int64 // the handler's deliveries being handled, redeliveries aside (handled alone)
	var settle func()         // a batch handler's: a batch may wait for them
	hc.inFlight = func() int { return int(inFlight.Load()) }
	hc.onSettle = func(f func()) { settle = f }
	h, err := build(hc)
	if err != nil {
		return err
	}
	group := b.group(hc.name)
	if hc.delays != nil && len(*hc.delays) > 0 && b.cfg.DB == nil {
		return fmt.Errorf("bus: handler %s: WithDelayedRetries needs Config.DB: delayed retries wait in the database", hc.name)
	}
	if hc.delays != nil {
		b.mu.Lock()
		b.retryDelays[hc.name] = *hc.delays
		b.mu.Unlock()
	}
	lim := newLimiter(hc.name, b.cfg.RateLimit, b.cfg.Logger, b.cfg.Metrics.Recorder)
	// Enough in flight for every batch to fill.
	plain, err := b.cfg.Transport.Subscriber(group, max(hc.concurrency, 1)*max(hc.batchSize, 1))
	if err != nil {
		return fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	sub := b.draining(plain)
	b.mu.Lock()
	b.opened = append(b.opened, sub) // the router closes it too, once it ran
	b.mu.Unlock()
	var traced message.HandlerMiddleware
	if b.cfg.Tracing.Provider != nil {
		if traced, err = tracing.New(tracing.Config{TracerProvider: b.cfg.Tracing.Provider, Propagator: b.cfg.Tracing.Propagator, Handler: hc.name}); err != nil {
			return fmt.Errorf("bus: handler %s: %w", hc.name, err)
		}
	}
	// The delivery in its span and Config.Middleware, for a delayed retry too.
	chain := func(topic string) message.HandlerFunc {
		var delivery message.HandlerFunc = func(msg *message.Message) ([]*message.Message, error) {
			return nil, b.deliver(hc.name, topic, msg, h, lim)
		}
		if traced != nil {
			delivery = traced(delivery)
		}
		for i := len(b.cfg.Middleware) - 1; i >= 0; i-- {
			delivery = b.cfg.Middleware[i](delivery)
		}
		return delivery
	}
	b.mu.Lock()
	b.retryTargets[group] = func(topic string, msg *message.Message) error {
		// Counted as a first read, a retry that kills its process reaches
		// the error topic after MaxDeliveries, not rerun after each lease.
		msg.Metadata.Set(metadata.Redelivered, metadata.RedeliveredFirstRead)
		return b.guarded(hc.name, topic, b.delayedRetryCounter(), chain(topic))(msg)
	}
	b.mu.Unlock()
	for _, topic := range []string{commandTopic(b.cfg.Endpoint, name), eventTopic(name)} {
		// Declared now, so a message sent before Run waits in the queue.
		if err := declare(plain, topic, topic == eventTopic(name)); err != nil {
			return fmt.Errorf("bus: handler %s: declare its queue for %s: %w", hc.name, topic, err)
		}
		guarded := b.guarded(hc.name, topic, b.counterFor(caps), chain(topic))
		b.router.AddConsumerHandler(hc.name+"@"+topic, topic, sub, func(msg *message.Message) error {
			growStack()
			// Only a batch waits for these; a redelivery runs alone.
			if hc.batchSize > 1 && !b.redelivery(group, msg) {
				inFlight.Add(1)
				defer func() {
					inFlight.Add(-1)
					if settle != nil {
						settle()
					}
				}()
			}
			b.drain.Add()
			defer b.drain.Done()
			defer b.outliveStop(msg)()
			err := guarded(msg)
			// Settled before the delivery stops counting as held (drainingSubscriber).
			switch {
			case errors.Is(err, errStopping):
				// deliver logged it at info; Watermill would say error.
				msg.Nack()
				return nil
			case err != nil:
				msg.Nack()
			default:
				msg.Ack()
			}
			return err
		})
	}
	registered = true
	return nil
}

// declare declares sub's queue for topic: from now on for an event topic
// where the transport would otherwise replay its history (transport.FromNow).
func declare(sub message.Subscriber, topic string, event bool) error {
	if from, ok := sub.(transport.FromNow); ok && event {
		return from.SubscribeInitializeFromNow(topic)
	}
	if init, ok := sub.(message.SubscribeInitializer); ok {
		return init.SubscribeInitialize(topic)
	}
	return nil
}

// consumer names a handler in its inbox keys and watermarks; endpoint
// names have no '/', so the parts never run together.
func (b *Bus) consumer(handler string) string { return b.cfg.Endpoint + "/" + handler }

// group is the subscriber group of a handler: one queue per handler.
func (b *Bus) group(handler string) string { return GroupOf(b.cfg.Endpoint, handler) }

func (b *Bus) reserve(name string, byRun bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		// It names the consumer in the database, where it would fail.
		if name == "" {
			return errors.New("bus: handler name is empty: name it with bus.Named (it defaults to its message's name, which is empty too if MessageName returns \"\")")
		}
		return fmt.Errorf("bus: handler name %q: use valid UTF-8 without NUL (bus.Named)", name)
	case b.running && !byRun:
		return fmt.Errorf("bus: handler %s registered after Run: register every handler first", name)
	case b.handlers[name]:
		return fmt.Errorf("bus: two handlers named %s: give one a distinct name with bus.Named", name)
	}
	b.handlers[name] = true
	return nil
}

// chain wraps h in the unit of work, inbox and stale check hc asks for.
func (b *Bus) chain(hc handlerConfig, h message.HandlerFunc) (message.HandlerFunc, error) {
	if !hc.transaction && !hc.inbox && !hc.stale {
		return h, nil
	}
	if b.cfg.DB == nil {
		return nil, fmt.Errorf("bus: handler %s uses a transaction, the inbox or the stale check: set Config.DB", hc.name)
	}
	if err := hc.validateBatch(); err != nil {
		return nil, err
	}
	rec := namedRecorder{hc.name, b.cfg.Metrics.Recorder}
	consumer := b.consumer(hc.name)
	if err := b.keepsKeys(hc); err != nil {
		return nil, err
	}
	if err := b.checkRetention(hc); err != nil {
		return nil, err
	}
	if hc.stale {
		// The handler's message type, not metadata's: a foreign producer
		// need not set it (docs/foreign-producers.md).
		mw, err := stale.New(stale.Config{DB: b.cfg.DB, Consumer: consumer, MessageType: hc.messageName, Version: hc.version,
			Recorder: rec, Logger: b.cfg.Logger, Now: b.cfg.Now})
		if err != nil {
			return nil, err
		}
		h = mw(h)
	}
	if !hc.inbox {
		return b.inUnitOfWork(hc, h)
	}
	icfg := inbox.Config{DB: b.cfg.DB, Consumer: consumer, Key: hc.inboxKey, Recorder: rec, Logger: b.cfg.Logger, Now: b.cfg.Now,
		Checksum: hc.checksum, StorePayload: hc.payload}
	if hc.external != nil {
		// The External mode opens the unit of work itself, after the claim.
		icfg.Mode, icfg.OnUnknown, icfg.Lease = inbox.External, hc.external.OnUnknown, cmp.Or(hc.external.Lease, inbox.LeaseDefault)
	}
	mw, err := inbox.New(icfg)
	if err != nil {
		return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	// Both modes open the unit of work themselves (a duplicate is counted
	// after the rollback); in a batch they join the member's instead.
	h = mw(h)
	if hc.batchSize > 1 {
		return b.inUnitOfWork(hc, h)
	}
	return h, nil
}

// checkRetention refuses an InboxRetention shorter than the time a copy of
// hc's messages may still arrive: after cleanup purged its key or watermark
// it would be applied again, or over a newer update.
func (b *Bus) checkRetention(hc handlerConfig) error {
	if !hc.inbox && !hc.stale {
		return nil
	}
	horizon := b.keyHorizon(hc)
	if hc.external != nil { // a copy may wait a lease before it is handled
		horizon += cmp.Or(hc.external.Lease, inbox.LeaseDefault)
	}
	if err := idempotency.CheckRetention(b.cfg.InboxRetention, horizon); err != nil {
		return fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	return nil
}

// keepsKeys records that cleanup must purge the handler's keys or watermarks.
func (b *Bus) keepsKeys(hc handlerConfig) error {
	if !hc.inbox && !hc.stale {
		return nil
	}
	consumer := b.consumer(hc.name)
	if len(consumer) > inbox.MaxKeyLength {
		return fmt.Errorf("bus: handler %s: its consumer %q is longer than %d bytes: give it a shorter name with bus.Named", hc.name, consumer, inbox.MaxKeyLength)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.needsCleanup = true
	return nil
}

// inUnitOfWork runs h in a transaction per message, or in a batch's.
func (b *Bus) inUnitOfWork(hc handlerConfig, h message.HandlerFunc) (message.HandlerFunc, error) {
	mw, err := uow.New(uow.Config{DB: b.cfg.DB, BatchSize: hc.batchSize, BatchWait: hc.batchWait, InFlight: hc.inFlight})
	if err != nil {
		return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	return mw(h), nil
}

// validate checks the options that every handler shape takes.
func (hc handlerConfig) validate() error {
	var errs []error
	if hc.concurrency < 1 {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithConcurrency %d: must be at least 1", hc.name, hc.concurrency))
	}
	if hc.inboxConfigs > 1 {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithInbox was given %d Inbox values: give one, with every field it needs", hc.name, hc.inboxConfigs))
	}
	if hc.staleConfigs > 1 {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithStale was given %d versions: give one", hc.name, hc.staleConfigs))
	}
	if hc.delays != nil {
		for _, d := range *hc.delays {
			if d < 0 {
				errs = append(errs, fmt.Errorf("bus: handler %s: WithDelayedRetries delay %s is negative", hc.name, d))
			}
		}
	}
	return errors.Join(errs...)
}

// batchSizeMax bounds WithBatch's size: a batch holds its messages'
// broker deliveries and one transaction's locks until it commits.
const batchSizeMax = 1000

func (hc handlerConfig) validateBatch() error {
	if !hc.batched {
		return nil
	}
	var errs []error
	if hc.batchSize < 1 || hc.batchSize > batchSizeMax {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithBatch size %d: must be 1 to %d", hc.name, hc.batchSize, batchSizeMax))
	}
	if hc.batchWait < 0 {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithBatch maxWait %s is negative", hc.name, hc.batchWait))
	}
	if hc.external != nil {
		errs = append(errs, fmt.Errorf("bus: handler %s: WithBatch and Inbox.ExternalEffects do not combine: an external effect's claim commits before its handler runs, outside any batch", hc.name))
	}
	return errors.Join(errs...)
}

// decoded checks and decodes each message before h, the handler's chain,
// and passes it on in the attempt's incoming: bad input goes to the error
// topic at once, before the inbox or the stale check touch the database.
func decoded[T any](b *Bus, h message.HandlerFunc) message.HandlerFunc {
	name := MessageName[T]()
	return func(msg *message.Message) ([]*message.Message, error) {
		in := incomingFrom(msg.Context())
		if in == nil {
			return nil, fmt.Errorf("bus: %s handled outside an attempt of the bus", name)
		}
		m, err := decode[T](b, name, msg)
		if err != nil {
			return nil, err
		}
		in.decoded = m
		return h(msg)
	}
}

// typed calls fn with the message decoded before the chain.
func typed[T any](fn HandlerFunc[T]) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		in := incomingFrom(ctx)
		var m *T
		if in != nil {
			m, _ = in.decoded.(*T)
		}
		if m == nil {
			return nil, fmt.Errorf("bus: %s was not decoded before its handler", MessageName[T]())
		}
		if !uow.Active(ctx) {
			defer hintNoTx()
		}
		if err := fn(ctx, m); err != nil {
			return nil, err
		}
		in.ran = true
		return nil, nil
	}
}

// hintNoTx, deferred in a handler without a transaction, adds to a nil
// dereference panic its likeliest cause: Tx(ctx) is nil there.
func hintNoTx() {
	r := recover()
	if r == nil {
		return
	}
	if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "nil pointer dereference") {
		panic(fmt.Sprintf("%v (if from unitofwork.Tx(ctx): it is nil in a handler registered without WithTransaction, WithInbox, WithStale or WithBatch)", re))
	}
	panic(r)
}

// decode checks and decodes msg; what no attempt can handle is unrecoverable.
func decode[T any](b *Bus, name string, msg *message.Message) (*T, error) {
	if err := b.checkInput(msg); err != nil {
		return nil, err
	}
	if got := msg.Metadata.Get(metadata.MessageType); got != "" && got != name {
		return nil, &unrecoverableError{fmt.Errorf("bus: unknown message type %q on the topic of %s", got, name)}
	}
	var m T
	if err := b.cfg.Marshaler.Unmarshal(msg.Payload, &m); err != nil {
		if len(msg.Payload) == 0 { // said as such: JSON's "unexpected end of JSON input" does not
			return nil, &unrecoverableError{fmt.Errorf("bus: malformed %s payload: it is empty: %w", name, err)}
		}
		return nil, &unrecoverableError{fmt.Errorf("bus: malformed %s payload: %w", name, err)}
	}
	return &m, nil
}

// checkInput refuses a payload over the limit and metadata not UTF-8.
func (b *Bus) checkInput(msg *message.Message) error {
	if len(msg.Payload) > b.cfg.MaxPayloadBytes {
		return &unrecoverableError{fmt.Errorf("bus: payload of %d bytes is over the limit of %d (Config.MaxPayloadBytes)", len(msg.Payload), b.cfg.MaxPayloadBytes)}
	}
	for k, v := range msg.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return &unrecoverableError{fmt.Errorf("bus: metadata %q is not valid UTF-8", k)}
		}
	}
	return nil
}

// namedRecorder records under the bus handler's name.
type namedRecorder struct {
	name string
	rec  metrics.Recorder
}

func (r namedRecorder) Record(_ string, e metrics.Event) { r.rec.Record(r.name, e) }

// incoming is the bus's state for the message being handled, the one
// context value the bus adds to an attempt.
type incoming struct {
	msg      *message.Message
	decoded  any // *T, set by decoded before the handler's chain
	outgoing []outgoing
	ran      bool
	sends    *batchSends // a HandleBatch call's messages, when not nil
}

type outgoing struct {
	topic string
	msg   *message.Message
	at    time.Time // zero: now; else delivered at that time (DeliverAt)
	group string    // a delayed retry: delivered to this handler group alone
}

func (in *incoming) correlationID() string {
	if id := in.msg.Metadata.Get(metadata.CorrelationID); id != "" {
		return id
	}
	return in.msg.UUID
}

type incomingKey struct{}

func incomingFrom(ctx context.Context) *incoming {
	in, _ := ctx.Value(incomingKey{}).(*incoming)
	return in
}

// unrecoverableError is an error retrying cannot fix.
type unrecoverableError struct{ err error }

func (e *unrecoverableError) Error() string       { return e.err.Error() }
func (e *unrecoverableError) Unwrap() error       { return e.err }
func (e *unrecoverableError) Unrecoverable() bool { return true }

// Unrecoverable wraps err to say that retrying cannot help: the message
// goes to the error topic at once, without retries. errors.Is and errors.As
// see err through it; nil stays nil.
func Unrecoverable(err error) error {
	if err == nil {
		return nil
	}
	return &unrecoverableError{err}
}

// IsUnrecoverable reports whether err, or an error it wraps, has a method
// Unrecoverable() bool that returns true.
func IsUnrecoverable(err error) bool {
	var u interface{ Unrecoverable() bool }
	return errors.As(err, &u) && u.Unrecoverable()
}

// growStack grows a message goroutine's stack in one step while shallow,
// not by doubling in the driver (9% of a message in the inbox benchmark).
//
//go:noinline
func growStack() {
	var frame [stackAhead]byte
	use(frame[:])
}

// stackAhead is the frame growStack asks for: the stack then reaches 16 KiB,
// the largest size the runtime still takes from its per-P cache.
const stackAhead = 10 << 10

//go:noinline
func use([]byte) {}

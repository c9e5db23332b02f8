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

// Named names the handler. It defaults to the message name; two handlers of
// one message type in one endpoint need distinct names. The name is the
// inbox's consumer, so keep it stable.
func Named(name string) HandlerOption { return func(c *handlerConfig) { c.name = name } }

// WithTransaction runs the handler in a database transaction that Tx(ctx)
// returns; it commits when the handler returns nil.
func WithTransaction() HandlerOption { return func(c *handlerConfig) { c.transaction = true } }

// WithInbox makes the handler's effects happen once per message: the
// inbox key commits with the handler's transaction, and a duplicate is
// acked without calling the handler. Implies WithTransaction. Without an
// argument the key is the message's ID and source endpoint; at most one
// Inbox sets the key, the message log or the external-effects mode.
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
	// Key takes the key from the message (for EDI: the interchange sender
	// and control number, inbox/edi). nil: the message's ID and source
	// endpoint.
	Key inbox.KeyFunc
	// MessageLog records a checksum of each payload with its key: a
	// message that reuses a key with another payload goes to the error
	// topic as a producer bug instead of being skipped as a duplicate.
	MessageLog bool
	// StorePayload keeps the payload with the key too (and implies
	// MessageLog).
	StorePayload bool
	// ExternalEffects, when set, puts the inbox in its External mode: the
	// key is claimed and committed before the handler runs, the handler
	// passes IdempotencyKey(ctx) to the external system, and the key is
	// marked done with the handler's database writes. A copy that finds a
	// live claim waits for it; an attempt that ended without a known
	// outcome follows OnUnknown. Return NotDone(err) when the effect
	// certainly did not happen.
	ExternalEffects *ExternalEffects
}

// ExternalEffects configures a handler whose effects no transaction
// covers (an HTTP call, a file, an e-mail): Inbox.ExternalEffects.
type ExternalEffects struct {
	// OnUnknown decides what happens when an earlier attempt ended without
	// a known outcome: inbox.Park (the error topic, "outcome unknown") or
	// inbox.Retry (run again with the same IdempotencyKey). Defaults to
	// inbox.Park.
	OnUnknown inbox.Policy
	// Lease is how long an attempt holds its claim; the handler's context
	// ends with it. Defaults to inbox.LeaseDefault (one minute).
	Lease time.Duration
}

// IdempotencyKey returns the key to pass to an external system in a
// handler registered with Inbox.ExternalEffects: the same on every delivery and
// attempt of the message. It is "" in other handlers.
func IdempotencyKey(ctx context.Context) string { return inbox.IdempotencyKey(ctx) }

// NotDone wraps a handler's error to say that its external effect certainly
// did not happen: the claim is released and the message retried. Any other
// error of a handler with Inbox.ExternalEffects leaves the outcome unknown.
func NotDone(err error) error { return inbox.NotDone(err) }

// WithStale drops an update older than one already applied to the same
// entity (see WithVersion). Implies WithTransaction. The version is taken
// from the metadata WithVersion sets, or by version when one is given (at
// most one: from the payload, for a producer that is not postroom).
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
// handled at the same time share one database transaction, each in a
// savepoint of its own, and each is acked once the batch has committed. A
// batch commits when it has size messages, or maxWait after its first
// (10ms when maxWait is 0). A message whose
// handler fails rolls back to its savepoint alone and is retried alone
// while the others commit; the inbox, the stale check, DeliverAt and the
// outbox work per message as they do without a batch. The handler then
// takes size messages at once per Config.Concurrency (or WithConcurrency),
// which becomes the number of batches in flight. Batches of competing
// processes that hold copies of the same messages can deadlock (each
// claims its members' keys as they arrive); the database ends one, and its
// members are retried without spending retries (docs/recoverability.md).
// Implies WithTransaction; not with Inbox.ExternalEffects, whose claim
// commits before its handler runs.
func WithBatch(size int, maxWait time.Duration) HandlerOption {
	return func(c *handlerConfig) { c.transaction, c.batched, c.batchSize, c.batchWait = true, true, size, maxWait }
}

// WithConcurrency overrides Config.Concurrency for this handler: at least 1.
func WithConcurrency(n int) HandlerOption { return func(c *handlerConfig) { c.concurrency = n } }

// HandlerFunc handles one message of type T. Returning an error rolls back
// its transaction and retries the message.
type HandlerFunc[T any] func(ctx context.Context, m *T) error

// Handle registers fn for messages of type T: commands sent to this
// endpoint and events published by anyone. Call it before Run.
func Handle[T any](b *Bus, fn HandlerFunc[T], opts ...HandlerOption) error {
	if b == nil || fn == nil {
		return fmt.Errorf("bus: Handle of %s: the bus and the handler function must not be nil", MessageName[T]())
	}
	return handle(b, fn, false, opts...)
}

// handle registers fn; byRun is true for the bus's own handlers, which Run
// registers before it starts the router.
func handle[T any](b *Bus, fn HandlerFunc[T], byRun bool, opts ...HandlerOption) error {
	return b.register(MessageName[T](), byRun, opts, func(hc handlerConfig) (message.HandlerFunc, error) {
		h, err := b.chain(hc, typed(fn))
		if err != nil {
			return nil, err
		}
		return decoded[T](b, h), nil
	})
}

// register subscribes the handler of the message type name that build
// returns for its configuration.
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
	// One subscription per topic holds the handler's messages in flight,
	// each run by the router on a goroutine of its own: a batch fills with
	// messages handled at the same time.
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
	// chain is the handler's delivery of a message of topic, in its span
	// and Config.Middleware: for the router, and for a delayed retry run
	// from the database alike: outside them a retry's trace would end, its
	// sends would start new ones, and no Middleware would see it.
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
		// A delayed retry whose run ended its process runs again when
		// its lease ends: counted as a first read, it reaches the error
		// topic after MaxDeliveries instead of running after each lease
		// for ever.
		msg.Metadata.Set(metadata.Redelivered, metadata.RedeliveredFirstRead)
		return b.guarded(hc.name, topic, chain(topic))(msg)
	}
	b.mu.Unlock()
	for _, topic := range []string{commandTopic(b.cfg.Endpoint, name), eventTopic(name)} {
		// The handler's queue exists from now on: a message sent before
		// Run waits in it instead of being dropped.
		if err := declare(plain, topic, topic == eventTopic(name)); err != nil {
			return fmt.Errorf("bus: handler %s: declare its queue for %s: %w", hc.name, topic, err)
		}
		guarded := b.guarded(hc.name, topic, chain(topic))
		b.router.AddConsumerHandler(hc.name+"@"+topic, topic, sub, func(msg *message.Message) error {
			growStack()
			// Only a batch asks; a redelivery, handled alone, is
			// not for the open batch to wait for.
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
			// Settled here, before the delivery stops counting as
			// held (drainingSubscriber); Watermill's own Ack or Nack
			// after this does nothing more.
			switch {
			case errors.Is(err, errStopping):
				// Given back because the bus stops, said at info by
				// deliver; Watermill would log it at error.
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

// consumer names a handler in its inbox keys and watermarks: the endpoint
// and the handler, so that two handlers of one message type, or one handler
// in two endpoints sharing a database, each handle every message once.
// Endpoint names have no '/', so the two parts never run together.
func (b *Bus) consumer(handler string) string { return b.cfg.Endpoint + "/" + handler }

// group is the subscriber group of a handler: one queue per handler.
func (b *Bus) group(handler string) string { return GroupOf(b.cfg.Endpoint, handler) }

func (b *Bus) reserve(name string, byRun bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		// It names the handler's consumer in the inbox and the watermarks:
		// such a name would fail every message on the database.
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

// chain wraps the typed handler in the unit of work, inbox and stale check
// the options ask for; a handler with none of them pays for none.
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
		// The watermark's type is the handler's message type: a foreign
		// producer need not set postroom-message-type (docs/foreign-producers.md).
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
		// The claim commits before the handler runs, so the External mode
		// opens the handler's unit of work itself.
		icfg.Mode, icfg.OnUnknown, icfg.Lease = inbox.External, hc.external.OnUnknown, cmp.Or(hc.external.Lease, inbox.LeaseDefault)
	}
	mw, err := inbox.New(icfg)
	if err != nil {
		return nil, fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	// Both modes open the handler's unit of work themselves; the
	// Transactional mode then counts a duplicate after its rollback. In a
	// batch they join the member's unit of work instead.
	h = mw(h)
	if hc.batchSize > 1 {
		return b.inUnitOfWork(hc, h)
	}
	return h, nil
}

// checkRetention refuses an InboxRetention shorter than the time after
// which a message of hc may still arrive, for a handler that keeps inbox
// keys or watermarks: cleanup purges both after the retention, and a copy
// arriving after its key or watermark is gone would be applied again (a
// duplicate), or applied over a newer update (a stale one). A handler
// WithStale alone is checked too: were its watermark purged while an
// older update waits in a delayed retry, that update would be applied
// after the newer one.
func (b *Bus) checkRetention(hc handlerConfig) error {
	if !hc.inbox && !hc.stale {
		return nil
	}
	horizon := b.keyHorizon(hc)
	if hc.external != nil { // a copy may wait a lease before it is handled
		horizon += cmp.Or(hc.external.Lease, inbox.LeaseDefault)
	}
	if err := inbox.CheckRetention(b.cfg.InboxRetention, horizon); err != nil {
		return fmt.Errorf("bus: handler %s: %w", hc.name, err)
	}
	return nil
}

// keepsKeys records that the handler keeps inbox keys or watermarks under
// its consumer, which cleanup purges.
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

// inUnitOfWork runs h in a unit of work: a transaction per message, or a
// batch's (WithBatch).
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
// and passes the decoded message on in its context. Input no attempt can
// handle (a malformed payload, an unknown type, metadata that is not
// UTF-8) then fails before the inbox writes its key and before the stale
// check: it goes to the error topic at once with its reason, not after
// retries with the database's complaint about the key's type, nor parked
// as "outcome unknown" by the external-effects mode when the handler never
// ran.
func decoded[T any](b *Bus, h message.HandlerFunc) message.HandlerFunc {
	name := MessageName[T]()
	return func(msg *message.Message) ([]*message.Message, error) {
		m, err := decode[T](b, name, msg)
		if err != nil {
			return nil, err
		}
		msg.SetContext(context.WithValue(msg.Context(), decodedKey{}, m))
		return h(msg)
	}
}

type decodedKey struct{}

// typed calls fn with the message decoded before the chain, and the
// message's context.
func typed[T any](fn HandlerFunc[T]) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		m, ok := ctx.Value(decodedKey{}).(*T)
		if !ok {
			return nil, fmt.Errorf("bus: %s was not decoded before its handler", MessageName[T]())
		}
		if !uow.Active(ctx) {
			defer hintNoTx()
		}
		if err := fn(ctx, m); err != nil {
			return nil, err
		}
		if in := incomingFrom(ctx); in != nil {
			in.ran = true
		}
		return nil, nil
	}
}

// hintNoTx, deferred in a handler without a transaction, adds to a nil
// dereference panic its likeliest cause: Tx(ctx) is nil there. Without
// it the error topic says only "invalid memory address or nil pointer
// dereference", and names no option.
func hintNoTx() {
	r := recover()
	if r == nil {
		return
	}
	if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "nil pointer dereference") {
		panic(fmt.Sprintf("%v (if from bus.Tx(ctx): it is nil in a handler registered without WithTransaction, WithInbox, WithStale or WithBatch)", re))
	}
	panic(r)
}

// decode checks msg and decodes its payload, a message of type name; what
// no attempt can handle is an unrecoverable error.
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

// checkInput refuses what no attempt can handle: a payload over the limit,
// metadata that is not valid UTF-8.
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

// incoming is the bus's state for the message being handled.
type incoming struct {
	msg      *message.Message
	outgoing []outgoing
	ran      bool
	// sends, when not nil, ties this message to the others of a
	// HandleBatch call whose sends the first of them carries.
	sends *batchSends
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

// Unrecoverable wraps err to say that retrying cannot help (a malformed
// order, a customer that does not exist): a handler that returns it has
// its message moved to the error topic at once, without retries.
// errors.Is and errors.As see err through it; nil stays nil.
func Unrecoverable(err error) error {
	if err == nil {
		return nil
	}
	return &unrecoverableError{err}
}

// IsUnrecoverable reports whether err, or an error it wraps, says retrying
// cannot help (it has a method Unrecoverable() bool that returns true). Such
// a message goes to the error topic without retries.
func IsUnrecoverable(err error) bool {
	var u interface{ Unrecoverable() bool }
	return errors.As(err, &u) && u.Unrecoverable()
}

// growStack grows the calling goroutine's stack in one step, while it is
// still shallow. Watermill runs every message on a new goroutine, which
// starts with a small stack; the database driver's depth then grows it by
// doubling, each time copying the frames above. Growing it first costs one
// copy of a few frames instead. (In a CPU profile of the inbox benchmark
// the doubling is 9% of a message's handling.)
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

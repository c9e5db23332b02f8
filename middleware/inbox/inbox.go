package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
)

// TableDefault is the default inbox table.
const TableDefault = dialect.InboxTableDefault

// LeaseDefault is the default claim lease of the external-effects mode.
const LeaseDefault = time.Minute

// Mode is how the inbox makes a handler's effects happen once.
type Mode int

const (
	// Transactional records the key in the handler's own transaction:
	// right for effects that are database writes through that transaction.
	Transactional Mode = iota
	// External claims the key, commits the claim, runs the handler and then
	// marks the key done: for effects no transaction covers (an HTTP call).
	External
)

// Policy decides what happens to a message whose earlier attempt, in the
// External mode, ended without a known outcome.
type Policy int

const (
	// Park sends the message to the error topic with reason "outcome
	// unknown" and never runs it again on its own; an operator resolves it.
	Park Policy = iota
	// Retry runs the handler again with the same idempotency key: right
	// when the external system deduplicates on that key.
	Retry
)

// String is the policy's name.
func (p Policy) String() string {
	if p == Retry {
		return "retry"
	}
	return "park"
}

// Config configures the inbox middleware.
type Config struct {
	// DB is the database of the inbox table and of the handler's writes. Required.
	DB *gorm.DB
	// Table is the inbox table. Defaults to "postroom_inbox".
	Table string
	// Consumer names the consumer in the key. Defaults to the Watermill
	// handler name of the message.
	Consumer string
	// Key takes the key from a message. Defaults to DefaultKey.
	Key KeyFunc
	// Recorder counts duplicates per consumer. Defaults to metrics.Discard.
	Recorder metrics.Recorder
	// Logger logs duplicates at debug level. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for received_at and leases. Defaults to time.Now.
	Now func() time.Time

	// Mode is Transactional or External. Defaults to Transactional.
	Mode Mode
	// Lease is how long, in the External mode, an attempt holds its claim
	// (a copy waits for a live claim; an expired one's outcome is unknown).
	// Make it longer than the slowest external call; the handler's context
	// ends with it. Defaults to LeaseDefault (one minute).
	Lease time.Duration
	// OnUnknown is the policy, in the External mode, for a message whose
	// earlier attempt ended without a known outcome. Defaults to Park.
	OnUnknown Policy
	// Checksum records a SHA-256 of the payload with the key: a later
	// message with the same key and another checksum is a reused ID
	// ([ErrIDReused]). Defaults to false.
	Checksum bool
	// StorePayload records the payload with the key, as a message log.
	// Implies Checksum. Defaults to false.
	StorePayload bool
}

func (c Config) withDefaults() Config {
	c.Table = cmp.Or(c.Table, TableDefault)
	if c.Key == nil {
		c.Key = DefaultKey
	}
	if c.Recorder == nil {
		c.Recorder = metrics.Discard{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.Checksum = c.Checksum || c.StorePayload
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("inbox: Config.DB is nil: pass the *gorm.DB the handler writes to"))
	}
	if err := dialect.ValidateIdentifier(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("inbox: Config.Table: %w", err))
	}
	if len(c.Consumer) > MaxKeyLength {
		errs = append(errs, fmt.Errorf("inbox: Config.Consumer is longer than %d bytes", MaxKeyLength))
	}
	if c.Mode != Transactional && c.Mode != External {
		errs = append(errs, fmt.Errorf("inbox: Config.Mode %d is neither Transactional nor External", c.Mode))
	}
	if c.Lease < 0 {
		errs = append(errs, fmt.Errorf("inbox: Config.Lease %s is negative", c.Lease))
	}
	if c.OnUnknown != Park && c.OnUnknown != Retry {
		errs = append(errs, fmt.Errorf("inbox: Config.OnUnknown %d is neither Park nor Retry", c.OnUnknown))
	}
	return errors.Join(errs...)
}

// New returns the inbox middleware.
func New(cfg Config) (message.HandlerMiddleware, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if cfg.Mode == External {
		return newExternal(cfg, d), nil
	}
	t := transactional{cfg: cfg, d: d, insert: d.Native(d.InboxInsert(cfg.Table)), countDup: d.InboxCountDuplicate(cfg.Table),
		countDupNative: d.Native(d.InboxCountDuplicate(cfg.Table)), left: newLeftovers(cfg, d)}
	if cfg.Checksum {
		t.insert = d.Native(d.InboxInsertLogged(cfg.Table))
	}
	return t.middleware, nil
}

// transactional is the Transactional mode: the key is inserted in the
// handler's unit of work.
type transactional struct {
	cfg            Config
	d              dialect.Dialect
	insert         string
	countDup       string
	countDupNative string // countDup with the driver's placeholders
	left           leftovers
}

func (t transactional) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		owned := !uow.Active(msg.Context())
		var dup *dupOf
		var park *parkOf
		out, err := uow.Run(t.cfg.DB, msg, func(msg *message.Message) ([]*message.Message, error) {
			return t.claim(msg, h, &dup, &park)
		})
		if dup != nil && owned {
			// Not inside a caller's unit: its connection may be the only one.
			t.cfg.countDuplicate(msg.Context(), t.countDup, dup.consumer, dup.key)
		}
		if park != nil && owned {
			t.left.parkAlone(msg.Context(), park)
		}
		return out, err
	}
}

// dupOf is the key of a duplicate, to count once its transaction ended.
type dupOf struct {
	consumer string
	key      Key
}

// claim inserts the key in the unit of work and calls h when it is new.
func (t transactional) claim(msg *message.Message, h message.HandlerFunc, dup **dupOf, park **parkOf) ([]*message.Message, error) {
	ctx := msg.Context()
	consumer, key, err := t.cfg.keyOf(msg)
	if err != nil {
		return nil, err
	}
	args := []any{consumer, key.Source, key.MessageID, msg.Metadata.Get(metadata.MessageType), t.d.Time(t.cfg.Now())}
	sum := ""
	if t.cfg.Checksum {
		sum = checksum(msg.Payload)
		args = append(args, sum, t.cfg.payload(msg))
	}
	rows, err := uow.Exec(ctx, t.insert, args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: claim key: %w", err)
	}
	if rows == 1 {
		return h(msg)
	}
	c, gone, err := t.left.readTaken(ctx, consumer, key)
	if err != nil || gone != nil {
		return nil, cmp.Or(err, gone)
	}
	if sum != "" {
		if err := t.cfg.checkReuse(consumer, key, c.checksum, sum); err != nil {
			return nil, err
		}
	}
	now := t.cfg.Now()
	fresh, err := t.left.settle(ctx, consumer, key, c, now)
	switch {
	case err != nil && t.left.expired(c, now):
		// Parked after the rollback (in a batch, in its transaction).
		if !uow.AfterRollback(ctx, t.left.parkNative, t.left.parkArgs(c, consumer, key)...) {
			*park = &parkOf{consumer, key, c}
		}
		return nil, err
	case err != nil:
		return nil, err
	case fresh:
		return h(msg)
	}
	uow.RollbackOnly(ctx)
	t.cfg.duplicate(ctx, consumer, key)
	if !uow.AfterRollback(ctx, t.countDupNative, consumer, key.Source, key.MessageID) {
		*dup = &dupOf{consumer, key}
	}
	return nil, nil
}

// keyOf returns the consumer and the validated key of msg.
func (c Config) keyOf(msg *message.Message) (string, Key, error) {
	consumer := cmp.Or(c.Consumer, message.HandlerNameFromCtx(msg.Context()))
	key, err := c.Key(msg)
	if err != nil {
		return "", Key{}, &keyError{Reason: "key function failed", Err: err}
	}
	if err := key.validate(consumer); err != nil {
		return "", Key{}, err
	}
	return consumer, key, nil
}

// payload is what the message log stores: the payload, or NULL.
func (c Config) payload(msg *message.Message) any {
	if c.StorePayload {
		return []byte(msg.Payload)
	}
	return nil
}

// checkReuse refuses a message whose checksum differs from the stored one
// (a row recorded before checksums were on has none).
func (c Config) checkReuse(consumer string, key Key, stored, got string) error {
	if stored == "" || stored == got {
		return nil
	}
	c.Recorder.Record(consumer, metrics.Reused)
	return &reusedIDError{Consumer: consumer, Key: key, Stored: stored, Got: got}
}

// countDuplicate adds one to the key's duplicates on its row, in a
// statement of its own: a stat, never a reason to fail the message.
func (c Config) countDuplicate(ctx context.Context, stmt, consumer string, key Key) {
	if err := c.DB.WithContext(ctx).Exec(stmt, consumer, key.Source, key.MessageID).Error; err != nil {
		c.Logger.WarnContext(ctx, "inbox: count duplicate", "error", err)
	}
}

func (c Config) duplicate(ctx context.Context, consumer string, key Key) {
	c.Recorder.Record(consumer, metrics.Duplicate)
	c.Logger.DebugContext(ctx, "inbox: duplicate skipped",
		"consumer", consumer, "source", key.Source, "message_id", key.MessageID)
}

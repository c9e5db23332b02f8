package inbox

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// TableDefault is the default inbox table.
const TableDefault = dialect.InboxTableDefault

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
	// Now is the clock for received_at. Defaults to time.Now.
	Now func() time.Time
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
	return errors.Join(errs...)
}

// New returns the inbox middleware.
func New(cfg Config) (message.HandlerMiddleware, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := dialect.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	insert := d.Native(d.InboxInsert(cfg.Table))
	return func(h message.HandlerFunc) message.HandlerFunc {
		claim := func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			consumer := cmp.Or(cfg.Consumer, message.HandlerNameFromCtx(ctx))
			key, err := cfg.Key(msg)
			if err != nil {
				return nil, &KeyError{Reason: "key function failed", Err: err}
			}
			if err := key.validate(consumer); err != nil {
				return nil, err
			}
			rows, err := unitofwork.Exec(ctx, insert, consumer, key.Source, key.MessageID,
				msg.Metadata.Get(metadata.MessageType), d.Time(cfg.Now()))
			if err != nil {
				return nil, fmt.Errorf("inbox: claim key: %w", err)
			}
			if rows == 0 {
				unitofwork.RollbackOnly(ctx)
				cfg.Recorder.Record(consumer, metrics.Duplicate)
				cfg.Logger.DebugContext(ctx, "inbox: duplicate skipped",
					"consumer", consumer, "source", key.Source, "message_id", key.MessageID)
				return nil, nil
			}
			return h(msg)
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			return unitofwork.Run(cfg.DB, msg, claim)
		}
	}, nil
}

// ErrRetentionTooShort is the sentinel of CheckRetention's error.
var ErrRetentionTooShort = errors.New("inbox: retention is shorter than the redelivery horizon")

// CheckRetention refuses a retention shorter than horizon, the longest time
// after which a message may still be delivered again (in-process retries
// plus the broker's redelivery window): a key purged before then lets a
// duplicate through.
func CheckRetention(retention, horizon time.Duration) error {
	if retention < horizon {
		return fmt.Errorf("%w: retention %s is shorter than the retry and redelivery horizon %s: raise the retention or lower the retries",
			ErrRetentionTooShort, retention, horizon)
	}
	return nil
}

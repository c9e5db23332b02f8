package stale

import (
	"cmp"
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

// Defaults of Config.
const (
	TableDefault   = dialect.WatermarksTableDefault
	MaxSkewDefault = 5 * time.Minute
)

// Config configures the stale-update middleware.
type Config struct {
	// DB is the database of the watermark table and of the handler's writes. Required.
	DB *gorm.DB
	// Table is the watermark table. Defaults to "postroom_stale_watermarks".
	Table string
	// Consumer owns the watermarks (two handlers of one message type each
	// keep their own). Defaults to the Watermill handler name of the message
	// (the bus passes "endpoint/handler").
	Consumer string
	// MessageType names the kind of update; watermarks are kept per message
	// type and entity. Defaults to the metadata "postroom-message-type".
	MessageType string
	// Version takes the version from a message. Defaults to MetadataVersion.
	Version VersionFunc
	// MaxSkew is how far in the future a version may lie. Defaults to 5 minutes.
	MaxSkew time.Duration
	// Recorder counts stale updates per handler. Defaults to metrics.Discard.
	Recorder metrics.Recorder
	// Logger logs stale updates at debug, and at warn (at most every 10
	// minutes per consumer and message type) one skipped for a tie of
	// versions. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for the skew check and updated_at. Defaults to time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	c.Table = cmp.Or(c.Table, TableDefault)
	c.MaxSkew = cmp.Or(c.MaxSkew, MaxSkewDefault)
	if c.Version == nil {
		c.Version = MetadataVersion
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
		errs = append(errs, errors.New("stale: Config.DB is nil: pass the *gorm.DB the handler writes to"))
	}
	if err := dialect.ValidateIdentifier(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("stale: Config.Table: %w", err))
	}
	if c.MaxSkew < 0 {
		errs = append(errs, fmt.Errorf("stale: Config.MaxSkew %s is negative", c.MaxSkew))
	}
	return errors.Join(errs...)
}

// New returns the stale-update middleware.
func New(cfg Config) (message.HandlerMiddleware, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("stale: %w", err)
	}
	upsert := d.Native(d.WatermarkUpsert(cfg.Table))
	ties := newTies(d.Native(d.WatermarkRead(cfg.Table)), cfg.Logger)
	return func(h message.HandlerFunc) message.HandlerFunc {
		check := func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			v, err := cfg.Version(msg)
			if err != nil {
				var ve *VersionError
				if !errors.As(err, &ve) {
					err = &VersionError{Reason: "version function failed", Err: err}
				}
				return nil, err
			}
			messageType := cmp.Or(cfg.MessageType, msg.Metadata.Get(metadata.MessageType))
			now := cfg.Now()
			if err := v.validate(messageType, msg.UUID, now, cfg.MaxSkew); err != nil {
				return nil, err
			}
			consumer := cmp.Or(cfg.Consumer, message.HandlerNameFromCtx(ctx))
			if consumer == "" || len(consumer) > 200 {
				return nil, &VersionError{Reason: "consumer must have 1 to 200 bytes: set Config.Consumer or run under a Watermill router"}
			}
			rows, err := uow.Exec(ctx, upsert, consumer, messageType, v.EntityID, v.At.UnixNano(), msg.UUID, d.Time(now))
			if err != nil {
				return nil, fmt.Errorf("stale: upsert watermark: %w", err)
			}
			if rows == 0 {
				ties.check(ctx, consumer, messageType, v, msg.UUID, now)
				uow.RollbackOnly(ctx)
				cfg.Recorder.Record(consumer, metrics.Stale)
				if at := msg.Metadata.Get(metadata.Replayed); at != "" {
					// An operator's replay that ran nothing: say so.
					cfg.Logger.InfoContext(ctx, "stale: a message replayed from the error topic is older than the update applied since; skipped, its handler did not run",
						"consumer", consumer, "message_type", messageType, "entity_id", v.EntityID, "version", v.At, "message_id", msg.UUID, "moved_to_error_topic_at", at)
					return nil, nil
				}
				cfg.Logger.DebugContext(ctx, "stale: older update skipped", "consumer", consumer,
					"message_type", messageType, "entity_id", v.EntityID, "version", v.At, "message_id", msg.UUID)
				return nil, nil
			}
			return h(msg)
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			return uow.Run(cfg.DB, msg, check)
		}
	}, nil
}

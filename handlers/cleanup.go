package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// Defaults of CleanupStore.
const (
	RetentionDefault = 10 * 24 * time.Hour
	BatchSizeDefault = 5000
)

// CleanupStore asks for the inbox and watermark rows older than a cut-off
// to be deleted.
type CleanupStore struct {
	// Before is the cut-off; when zero, now minus Retention.
	Before time.Time
	// Retention is how long rows are kept when Before is zero. Defaults to 10 days.
	Retention time.Duration
	// BatchSize is the most rows one DELETE removes. Defaults to 5000.
	BatchSize int
}

// MessageName is the stable name of CleanupStore.
func (CleanupStore) MessageName() string { return "postroom.CleanupStore" }

// CleanupResult says what a cleanup deleted.
type CleanupResult struct {
	Cutoff     time.Time
	Inbox      int64
	Watermarks int64
	Batches    int
}

// CleanupConfig configures the CleanupStore handler.
type CleanupConfig struct {
	// DB holds the tables. Required.
	DB *gorm.DB
	// Tables names them. Defaults to the default names.
	Tables dialect.Tables
	// Logger logs each cleanup's result. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Cleanup handles CleanupStore.
type Cleanup struct {
	cfg CleanupConfig
	d   dialect.Dialect
}

// NewCleanup returns the CleanupStore handler.
func NewCleanup(cfg CleanupConfig) (*Cleanup, error) {
	if cfg.DB == nil {
		return nil, errors.New("handlers: CleanupConfig.DB is nil")
	}
	if err := cfg.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	cfg.Tables = cfg.Tables.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d, err := dialect.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	return &Cleanup{cfg: cfg, d: d}, nil
}

// Handle purges for one CleanupStore message; its signature fits bus.Handle.
func (c *Cleanup) Handle(ctx context.Context, m *CleanupStore) error {
	_, err := c.Purge(ctx, *m)
	return err
}

// Purge deletes the rows m asks for, batch by batch, and reports them.
func (c *Cleanup) Purge(ctx context.Context, m CleanupStore) (CleanupResult, error) {
	if m.Retention < 0 || m.BatchSize < 0 {
		return CleanupResult{}, fmt.Errorf("handlers: CleanupStore: negative retention %s or batch size %d", m.Retention, m.BatchSize)
	}
	res := CleanupResult{Cutoff: m.Before}
	if res.Cutoff.IsZero() {
		res.Cutoff = c.cfg.Now().Add(-cmp.Or(m.Retention, RetentionDefault))
	}
	batch := cmp.Or(m.BatchSize, BatchSizeDefault)
	var err error
	res.Inbox, err = c.purge(ctx, c.cfg.Tables.Inbox, c.d.InboxPurgeBatch(c.cfg.Tables.Inbox), []any{c.d.Time(res.Cutoff), c.d.Time(c.cfg.Now())}, batch, &res.Batches)
	if err != nil {
		return res, err
	}
	res.Watermarks, err = c.purge(ctx, c.cfg.Tables.Watermarks, c.d.PurgeBatch(c.cfg.Tables.Watermarks, "updated_at"), []any{c.d.Time(res.Cutoff)}, batch, &res.Batches)
	if err != nil {
		return res, err
	}
	c.cfg.Logger.InfoContext(ctx, "cleanup: purged", "cutoff", res.Cutoff, "inbox_rows", res.Inbox,
		"watermark_rows", res.Watermarks, "batches", res.Batches)
	return res, nil
}

// purge deletes until a batch comes back short; each DELETE commits alone,
// so locks are held for one batch only.
func (c *Cleanup) purge(ctx context.Context, table, stmt string, args []any, batch int, batches *int) (int64, error) {
	args = append(args, batch)
	var total int64
	for {
		r := c.cfg.DB.WithContext(ctx).Exec(stmt, args...)
		if r.Error != nil {
			return total, fmt.Errorf("handlers: purge %s: %w", table, r.Error)
		}
		*batches++
		total += r.RowsAffected
		if r.RowsAffected < int64(batch) {
			return total, nil
		}
	}
}

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
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/store"
)

// Defaults of CleanupStore.
const (
	RetentionDefault = 10 * 24 * time.Hour
	BatchSizeDefault = 1000
)

// CleanupStore asks for the inbox and watermark rows, relayed outbox rows
// and redelivery counts older than a cut-off to be deleted. A bus handling
// it never cuts later than now minus its Config.InboxRetention (said at
// warn), whatever Before and Retention ask.
type CleanupStore struct {
	// Before is the cut-off; when zero, now minus Retention.
	Before time.Time
	// Retention is how long rows are kept when Before is zero. Defaults to
	// 10 days (a bus: its Config.InboxRetention, and never less).
	Retention time.Duration
	// BatchSize is the most rows one DELETE removes. Defaults to 1000.
	BatchSize int
	// Pause is the rest between two batches, so handlers sharing the
	// database keep their latency. Zero (the default) rests as long as the
	// batch took; negative: no rest.
	Pause time.Duration
}

// MessageName is the stable name of CleanupStore.
func (CleanupStore) MessageName() string { return "postroom.CleanupStore" }

// CleanupResult says what a cleanup deleted.
type CleanupResult struct {
	Cutoff     time.Time
	Inbox      int64
	Watermarks int64
	// Outbox counts the relayed outbox rows deleted (with OutboxTopic).
	Outbox     int64
	Deliveries int64 // rows of postroom_deliveries not updated since
	Batches    int
}

// CleanupConfig configures the CleanupStore handler.
type CleanupConfig struct {
	// DB holds the tables. Required.
	DB *gorm.DB
	// Tables names them. Defaults to the default names.
	Tables store.Tables
	// OutboxTopic is the outbox's topic, whose relayed rows cleanup deletes
	// too (PostgreSQL, MySQL). Defaults to "": no outbox.
	OutboxTopic string
	// Logger logs each cleanup's result. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Progress is called after each batch with the table and the rows
	// deleted from it so far (for a progress bar). Defaults to nil.
	Progress func(table string, deleted int64)
	// ConsumerPrefix limits the inbox, watermark and redelivery-count
	// purges to consumers starting with it: a bus passes its endpoint's
	// ("billing/"), sparing other endpoints on the database. Defaults to
	// "": every consumer.
	ConsumerPrefix string
}

// Cleanup handles CleanupStore.
type Cleanup struct {
	cfg   CleanupConfig
	d     dialect.Dialect
	stmts dialect.CleanupStatements
}

// NewCleanup returns the CleanupStore handler.
func NewCleanup(cfg CleanupConfig) (*Cleanup, error) {
	if cfg.DB == nil {
		return nil, errors.New("handlers: CleanupConfig.DB is nil")
	}
	cfg.Tables = cfg.Tables.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	stmts, err := d.Cleanup(dialect.Tables(cfg.Tables), cfg.OutboxTopic)
	if err != nil {
		return nil, fmt.Errorf("handlers: CleanupConfig: %w", err)
	}
	return &Cleanup{cfg: cfg, d: d, stmts: stmts}, nil
}

// Handle purges for one CleanupStore message; its signature fits bus.Handle.
func (c *Cleanup) Handle(ctx context.Context, m *CleanupStore) error {
	_, err := c.Purge(ctx, *m)
	return err
}

// target is one table cleanup deletes from, with its arguments.
type target struct {
	dialect.PurgeTarget
	args []any
	// aging: the cut-off is an age applied at each DELETE (the outbox's),
	// so rows keep crossing it and a short batch ends the purge.
	aging bool
}

// targets returns m's targets in CleanupResult's order (the outbox's Table
// is "" without one) and its cut-off.
func (c *Cleanup) targets(m CleanupStore) ([]target, time.Time, error) {
	if m.Retention < 0 || m.BatchSize < 0 {
		return nil, time.Time{}, fmt.Errorf("handlers: CleanupStore: negative retention %s or batch size %d", m.Retention, m.BatchSize)
	}
	cutoff := m.Before
	if cutoff.IsZero() {
		cutoff = c.cfg.Now().Add(-cmp.Or(m.Retention, RetentionDefault))
	}
	targets := []target{
		{PurgeTarget: c.stmts.Inbox, args: []any{c.d.Time(cutoff), c.d.Time(c.cfg.Now())}},
		{PurgeTarget: c.stmts.Watermarks, args: []any{c.d.Time(cutoff)}},
		{}, // the outbox's, below
		{PurgeTarget: c.stmts.Deliveries, args: []any{c.d.Time(cutoff)}},
	}
	if p := c.cfg.ConsumerPrefix; p != "" {
		targets[0].PurgeTarget = c.stmts.InboxOf
		targets[1].PurgeTarget = c.stmts.WatermarksOf
		targets[3].PurgeTarget = c.stmts.DeliveriesOf
		for _, i := range []int{0, 1, 3} {
			targets[i].args = append(targets[i].args, len(p), p)
		}
	}
	if c.stmts.Outbox.Table != "" {
		// created_at is the database's clock: pass an age in seconds.
		age := int64(c.cfg.Now().Sub(cutoff) / time.Second)
		targets[2] = target{PurgeTarget: c.stmts.Outbox, args: []any{age}, aging: true}
	}
	return targets, cutoff, nil
}

// Purge deletes the rows m asks for, batch by batch, and reports them.
func (c *Cleanup) Purge(ctx context.Context, m CleanupStore) (CleanupResult, error) {
	targets, cutoff, err := c.targets(m)
	if err != nil {
		return CleanupResult{}, err
	}
	res := CleanupResult{Cutoff: cutoff}
	batch := cmp.Or(m.BatchSize, BatchSizeDefault)
	for i, t := range targets {
		if t.Table == "" { // the outbox's, without an outbox
			continue
		}
		if *res.count(i), err = c.purge(ctx, t, batch, m.Pause, &res.Batches); err != nil {
			return res, err
		}
	}
	c.cfg.Logger.InfoContext(ctx, "cleanup: purged", "cutoff", res.Cutoff, "inbox_rows", res.Inbox,
		"watermark_rows", res.Watermarks, "outbox_rows", res.Outbox, "delivery_counts", res.Deliveries, "batches", res.Batches)
	return res, nil
}

// count is the count of the i-th target (see targets).
func (r *CleanupResult) count(i int) *int64 {
	return [...]*int64{&r.Inbox, &r.Watermarks, &r.Outbox, &r.Deliveries}[i]
}

// Pending counts the rows Purge would delete for m, deleting nothing.
func (c *Cleanup) Pending(ctx context.Context, m CleanupStore) (CleanupResult, error) {
	targets, cutoff, err := c.targets(m)
	if err != nil {
		return CleanupResult{}, err
	}
	res := CleanupResult{Cutoff: cutoff}
	for i, t := range targets {
		if t.Table == "" { // the outbox's, without an outbox
			continue
		}
		if err := c.cfg.DB.WithContext(ctx).Raw(t.Count, t.args...).Row().Scan(res.count(i)); err != nil {
			return res, fmt.Errorf("handlers: count %s: %w", t.Table, err)
		}
	}
	return res, nil
}

// purge deletes, one committed batch at a time with a rest between, until
// a batch deletes nothing. A short batch is not the end (on PostgreSQL a
// row updated meanwhile moves), except for an aging target, where an empty
// batch may never come.
func (c *Cleanup) purge(ctx context.Context, t target, batch int, pause time.Duration, batches *int) (int64, error) {
	args := append(append([]any{}, t.args...), batch)
	var total int64
	for {
		start := time.Now()
		r := c.cfg.DB.WithContext(ctx).Exec(t.Delete, args...)
		if r.Error != nil {
			return total, fmt.Errorf("handlers: purge %s: %w", t.Table, r.Error)
		}
		*batches++
		total += r.RowsAffected
		if c.cfg.Progress != nil {
			c.cfg.Progress(t.Table, total)
		}
		if r.RowsAffected == 0 || (t.aging && r.RowsAffected < int64(batch)) {
			return total, nil
		}
		rest := pause
		if rest == 0 {
			rest = time.Since(start)
		}
		if rest > 0 {
			select {
			case <-time.After(rest):
			case <-ctx.Done():
				return total, fmt.Errorf("handlers: purge %s: %w", t.Table, ctx.Err())
			}
		}
	}
}

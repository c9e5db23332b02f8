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

// CleanupStore asks for the inbox and watermark rows older than a cut-off
// to be deleted, and the outbox rows relayed before it, and the
// redelivery counts not updated since. A bus handling it (every bus with
// an inbox, a stale check or an outbox does) never cuts later than now
// minus its Config.InboxRetention, whatever Before and Retention ask:
// keys a redelivery may still need stay (said at warn).
type CleanupStore struct {
	// Before is the cut-off; when zero, now minus Retention.
	Before time.Time
	// Retention is how long rows are kept when Before is zero. Defaults to
	// 10 days; a bus handling it uses its Config.InboxRetention instead,
	// and never less.
	Retention time.Duration
	// BatchSize is the most rows one DELETE removes. Defaults to 1000.
	BatchSize int
	// Pause is the rest between two batches, so that the handlers sharing
	// the database keep their latency while a large backlog is purged.
	// Zero (the default) rests as long as the batch took: the purge takes
	// at most half of the time it could. Negative: no rest, full speed.
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
	Outbox int64
	// Deliveries counts the redelivery counts deleted: messages counted
	// (postroom_deliveries) and not delivered since.
	Deliveries int64
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
	// ConsumerPrefix limits the inbox, watermark and redelivery-count purges to the
	// consumers whose names start with it: a bus passes its endpoint's
	// ("billing/"), so that its retention never purges the keys of
	// another endpoint sharing the database, which may need them longer.
	// Defaults to "": every consumer (the CLI's purge).
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
	// aging: the cut-off is an age the database applies at each DELETE
	// (the outbox's), so rows keep crossing it while the purge runs, and
	// a short batch ends the purge. Its rows are not updated once
	// relayed, so a short batch leaves none behind.
	aging bool
}

// targets returns the targets of m, in the order of CleanupResult's
// counts (inbox, watermarks, outbox, deliveries; the outbox's Table is ""
// without an outbox), and its cut-off.
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
		// The outbox's created_at is the database's clock: the cut-off
		// goes as an age in seconds.
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

// purge deletes until a batch deletes nothing; each DELETE commits alone,
// so locks are held for one batch only, and rests between batches (pause).
// A short batch is not the end: on PostgreSQL a row updated while the
// batch ran (a duplicate counted on an expired key) moves, and its
// batch comes back short with expired rows left. For an aging target it
// is: there, an empty batch may never come while rows keep crossing the
// cut-off.
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

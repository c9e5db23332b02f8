package scheduler

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// Control pauses, resumes and triggers stored schedules; the operator
// command uses it, and it needs no schedule definitions.
type Control struct {
	db    *gorm.DB
	d     dialect.Dialect
	table string
}

// NewControl returns a Control on db's schedules table (empty: the default).
func NewControl(db *gorm.DB, table string) (*Control, error) {
	if table == "" {
		table = TableDefault
	}
	if err := dialect.ValidateIdentifier(table); err != nil {
		return nil, err
	}
	d, err := dialect.Of(db)
	if err != nil {
		return nil, err
	}
	return &Control{db: db, d: d, table: table}, nil
}

// Pause stops a schedule from firing until Resume.
func (c *Control) Pause(ctx context.Context, name string) error { return c.setPaused(ctx, name, true) }

// Resume lets a paused schedule fire again. Slots missed while paused follow
// the schedule's missed-slot policy.
func (c *Control) Resume(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, false)
}

func (c *Control) setPaused(ctx context.Context, name string, paused bool) error {
	res := c.db.WithContext(ctx).Exec("UPDATE "+c.table+" SET paused = ? WHERE name = ?", paused, name)
	return c.one(res, name)
}

// Trigger makes a schedule due now: the next tick of any instance fires it.
func (c *Control) Trigger(ctx context.Context, name string, now time.Time) error {
	res := c.db.WithContext(ctx).Exec("UPDATE "+c.table+" SET next_run_at = ? WHERE name = ?", c.d.Time(now), name)
	return c.one(res, name)
}

func (c *Control) one(res *gorm.DB, name string) error {
	if res.Error != nil {
		return fmt.Errorf("scheduler: %q: %w", name, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("scheduler: no schedule named %q", name)
	}
	return nil
}

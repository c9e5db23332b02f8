// Package schedcontrol lists, pauses, resumes and triggers the schedules
// of package scheduler in their table, for the postroom command and the
// console.
package schedcontrol

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
)

// Control lists, pauses, resumes and triggers stored schedules; the
// operator command uses it, and it needs no schedule definitions.
type Control struct {
	db    *gorm.DB
	d     dialect.Dialect
	stmts dialect.ScheduleStatements
}

// New returns a Control on db's schedules table (empty: the default).
func New(db *gorm.DB, table string) (*Control, error) {
	if table == "" {
		table = dialect.SchedulesTableDefault
	}
	d, err := dialects.Of(db)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	stmts, err := d.Schedules(table)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return &Control{db: db, d: d, stmts: stmts}, nil
}

// Stored is a schedule as the table holds it.
type Stored struct {
	Name string `json:"name"`
	// Spec is its timing: "every 12h0m0s" or "cron 0 3 * * *".
	Spec      string    `json:"spec"`
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is nil until it first fired.
	LastRunAt *time.Time `json:"last_run_at,omitempty"`
	// LastFiredBy is the scheduler.Config.Instance that fired it last.
	LastFiredBy string `json:"last_fired_by"`
	Paused      bool   `json:"paused"`
}

// List returns every stored schedule, by name.
func (c *Control) List(ctx context.Context) ([]Stored, error) {
	rows, err := c.db.WithContext(ctx).Raw(c.stmts.List).Rows()
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	defer rows.Close()
	var list []Stored
	for rows.Next() {
		var s Stored
		var next, last any
		if err := rows.Scan(&s.Name, &s.Spec, &next, &last, &s.LastFiredBy, &s.Paused); err != nil {
			return nil, fmt.Errorf("scheduler: list: %w", err)
		}
		if s.NextRunAt, err = c.d.ParseTime(next); err != nil {
			return nil, fmt.Errorf("scheduler: list %q: %w", s.Name, err)
		}
		t, err := c.d.ParseTime(last)
		if err != nil {
			return nil, fmt.Errorf("scheduler: list %q: %w", s.Name, err)
		}
		if !t.IsZero() {
			s.LastRunAt = &t
		}
		list = append(list, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	return list, nil
}

// Pause stops a schedule from firing until Resume.
func (c *Control) Pause(ctx context.Context, name string) error { return c.setPaused(ctx, name, true) }

// Resume lets a paused schedule fire again. Slots missed while paused follow
// the schedule's missed-slot policy.
func (c *Control) Resume(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, false)
}

func (c *Control) setPaused(ctx context.Context, name string, paused bool) error {
	return c.one(ctx, c.db.WithContext(ctx).Exec(c.stmts.SetPaused, paused, name), name)
}

// Trigger makes a schedule due now, for the next tick of any instance; it
// only moves the next slot earlier (a late schedule keeps its due slots,
// for its missed-slot policy). The triggered slot's time, and so its
// SlotID, is now; the schedule then continues on its grid. A paused
// schedule is refused with an error matching [ErrPaused].
func (c *Control) Trigger(ctx context.Context, name string, now time.Time) error {
	t := c.d.Time(now)
	res := c.db.WithContext(ctx).Exec(c.stmts.Trigger, t, name, t)
	if res.Error != nil || res.RowsAffected > 0 {
		return c.one(ctx, res, name)
	}
	paused, err := c.paused(ctx, name)
	if err != nil {
		return err
	}
	if paused {
		return &pausedError{Name: name}
	}
	return nil // due already
}

// ErrPaused matches the error [Control.Trigger] returns for a paused
// schedule (the error names the schedule).
var ErrPaused = errors.New("scheduler: schedule is paused")

// pausedError says which schedule a trigger found paused.
type pausedError struct{ Name string }

// Error says which schedule is paused and what to do.
func (e *pausedError) Error() string {
	return fmt.Sprintf("scheduler: schedule %q is paused: resume it first", e.Name)
}

// Is reports whether target is [ErrPaused].
func (e *pausedError) Is(target error) bool { return target == ErrPaused }

// paused reads whether the schedule name is paused: an error if there is
// none of that name.
func (c *Control) paused(ctx context.Context, name string) (bool, error) {
	// Not gorm's Scan into a struct: it logs an error for a field of type any.
	var next any
	var paused bool
	query := c.db.WithContext(ctx).Raw(c.stmts.State, name)
	row := query.Row()
	if row == nil { // gorm returns none when the handle carries an error
		return false, fmt.Errorf("scheduler: %q: %w", name, query.Error)
	}
	if err := row.Scan(&next, &paused); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("scheduler: no schedule named %q", name)
		}
		return false, fmt.Errorf("scheduler: %q: %w", name, err)
	}
	return paused, nil
}

// one checks the update res of the schedule name: an error unless it
// exists (looked up, since MySQL counts only rows changed).
func (c *Control) one(ctx context.Context, res *gorm.DB, name string) error {
	if res.Error != nil {
		return fmt.Errorf("scheduler: %q: %w", name, res.Error)
	}
	if res.RowsAffected > 0 {
		return nil
	}
	_, err := c.paused(ctx, name)
	return err
}

package scheduler

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/store"
)

// Defaults of Config.
const (
	TableDefault        = dialect.SchedulesTableDefault
	PollIntervalDefault = time.Second
)

// EmitFunc emits the message of one slot. It runs inside the transaction
// that claims the slot (tx); an error rolls the claim back, so the slot
// fires again on the next tick.
type EmitFunc func(ctx context.Context, tx *gorm.DB, s Schedule, slot time.Time) error

// Config configures a scheduler.
type Config struct {
	// DB holds the schedules table. Required.
	DB *gorm.DB
	// Table is the schedules table. Defaults to "postroom_schedules".
	Table string
	// Schedules are the schedules this instance runs.
	Schedules []Schedule
	// Emit emits a slot's message. Required.
	Emit EmitFunc
	// Instance names this instance in last_fired_by. Defaults to the host name and process ID.
	Instance string
	// PollInterval is how often Run looks for due slots. Defaults to 1s.
	PollInterval time.Duration
	// Logger logs fires and failures. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// OnFire is called after this instance claimed a schedule's due slots,
	// with how many it emitted and how many the missed-slot policy left out
	// (for metrics). Defaults to nil.
	OnFire func(schedule string, emitted, missed int)
}

// Scheduler fires durable schedules.
type Scheduler struct {
	cfg       Config
	d         dialect.Dialect
	stmts     dialect.ScheduleStatements
	schedules map[string]*Schedule
}

// New validates cfg and returns a scheduler. Call Define before Tick or Run.
func New(cfg Config) (*Scheduler, error) {
	cfg.Table = cmp.Or(cfg.Table, TableDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var errs []error
	if cfg.DB == nil {
		errs = append(errs, errors.New("scheduler: Config.DB is nil"))
	}
	if cfg.Emit == nil {
		errs = append(errs, errors.New("scheduler: Config.Emit is nil: say what a slot emits"))
	}
	if err := dialect.ValidateIdentifier(cfg.Table); err != nil {
		errs = append(errs, fmt.Errorf("scheduler: Config.Table: %w", err))
	}
	s := &Scheduler{cfg: cfg, schedules: map[string]*Schedule{}}
	for _, sc := range cfg.Schedules {
		if err := sc.prepare(); err != nil {
			errs = append(errs, err)
			continue
		}
		if s.schedules[sc.Name] != nil {
			errs = append(errs, fmt.Errorf("scheduler: two schedules named %q", sc.Name))
		}
		s.schedules[sc.Name] = &sc
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if s.stmts, err = d.Schedules(cfg.Table); err != nil {
		return nil, fmt.Errorf("scheduler: Config.Table: %w", err)
	}
	s.d = d
	return s, nil
}

// Define stores each schedule that the table lacks, with its first slot
// after now. A stored schedule keeps its state; if its timing changed, the
// new spec is stored and its next slot recomputed.
func (s *Scheduler) Define(ctx context.Context) error {
	now := s.cfg.Now()
	db := s.cfg.DB.WithContext(ctx)
	for _, sc := range s.schedules {
		if err := db.Exec(s.stmts.Insert, sc.Name, sc.spec(), s.d.Time(sc.next(now)), s.d.Time(now)).Error; err != nil {
			return fmt.Errorf("scheduler: define %q: %w", sc.Name, err)
		}
		res := db.Exec(s.stmts.Redefine, sc.spec(), s.d.Time(sc.next(now)), s.d.Time(now), sc.Name, sc.spec())
		if res.Error != nil {
			return fmt.Errorf("scheduler: redefine %q: %w", sc.Name, res.Error)
		}
	}
	return nil
}

// Tick fires every due slot of this instance's schedules once and returns
// how many messages it emitted.
func (s *Scheduler) Tick(ctx context.Context) (int, error) {
	emitted := 0
	var errs []error
	for _, sc := range s.schedules {
		n, err := s.fire(ctx, sc)
		emitted += n
		errs = append(errs, err)
	}
	return emitted, errors.Join(errs...)
}

func (s *Scheduler) fire(ctx context.Context, sc *Schedule) (int, error) {
	now := s.cfg.Now()
	due, paused, err := s.state(ctx, sc.Name)
	if err != nil || paused || due.After(now) {
		return 0, err
	}
	slots, next, missed := sc.slots(due, now)
	claimed := false
	err = s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if s.stmts.Lock != "" {
			var names []string
			if err := tx.Raw(s.stmts.Lock, sc.Name, s.d.Time(due)).Scan(&names).Error; err != nil {
				return err
			}
			if len(names) == 0 {
				return nil // another instance holds its claim, or claimed it, or it was paused or triggered meanwhile
			}
		}
		res := tx.Exec(s.stmts.Claim, s.d.Time(next), s.d.Time(now), s.cfg.Instance, s.d.Time(now), sc.Name, s.d.Time(due))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return nil // another instance claimed it, or it was paused or triggered meanwhile
		}
		claimed = true
		for _, slot := range slots {
			if err := s.cfg.Emit(ctx, tx, *sc, slot); err != nil {
				return fmt.Errorf("emit slot %s: %w", slot.Format(time.RFC3339), err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("scheduler: %q: %w", sc.Name, err)
	}
	if !claimed {
		return 0, nil
	}
	if len(slots) > 0 {
		s.cfg.Logger.Info("scheduler: fired", "schedule", sc.Name, "slots", len(slots), "next", next)
	}
	if missed > 0 {
		s.cfg.Logger.Warn("scheduler: missed slots", "schedule", sc.Name, "missed", missed, "policy", sc.Missed)
	}
	if s.cfg.OnFire != nil {
		s.cfg.OnFire(sc.Name, len(slots), missed)
	}
	return len(slots), nil
}

func (s *Scheduler) state(ctx context.Context, name string) (next time.Time, paused bool, err error) {
	var raw any
	row := s.cfg.DB.WithContext(ctx).Raw(s.stmts.State, name).Row()
	if err := row.Scan(&raw, &paused); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return time.Time{}, false, fmt.Errorf("scheduler: schedule %q is not stored: call Define first", name)
		}
		return time.Time{}, false, fmt.Errorf("scheduler: read %q: %w", name, err)
	}
	next, err = s.d.ParseTime(raw)
	if err == nil && next.IsZero() {
		err = fmt.Errorf("scheduler: schedule %q has no next_run_at", name)
	}
	return next, paused, err
}

// Run calls Define, then Tick every PollInterval until ctx is done, and
// returns nil (a stop is not an error, even during start). Tick errors are
// logged and retried on the next tick.
func (s *Scheduler) Run(ctx context.Context) error {
	// Slots are DATETIME columns on MySQL: a connection in another zone
	// would shift them (and lose one at a change of clocks).
	if err := store.CheckTimeZone(ctx, s.cfg.DB); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("scheduler: %w", err)
	}
	if skew, err := storeinfo.ClockSkew(ctx, s.cfg.DB, time.Now); err == nil && (skew > storeinfo.ClockSkewWarning || skew < -storeinfo.ClockSkewWarning) {
		s.cfg.Logger.Warn("scheduler: this process's clock is off the database's; slots are timed by each instance's clock, "+
			"and one running ahead fires slots early and makes the others skip the slots up to its time: sync the clocks (NTP)",
			"ahead_by", skew.Round(time.Millisecond), "instance", s.cfg.Instance)
	}
	if err := s.Define(ctx); err != nil {
		if ctx.Err() != nil {
			// Whatever err says: SQLite's "interrupted (9)" does not wrap ctx's.
			return nil
		}
		return err
	}
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("scheduler: tick failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

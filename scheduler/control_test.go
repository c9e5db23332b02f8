package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/scheduler"
)

// TestTriggerKeepsTheMissedSlotsOfALateSchedule on every store: a CatchUp
// schedule five and a half hours late owes six slots; Trigger leaves them
// due, so the next tick emits all six on the grid (not one slot at the
// time of the trigger), and a trigger on a schedule not yet due makes it
// due at once.
func TestTriggerKeepsTheMissedSlotsOfALateSchedule(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			sc := scheduler.Schedule{Name: "hourly", Every: time.Hour, Missed: scheduler.CatchUp}
			s := newScheduler(t, db, c, "a", sc) // next slot 01:00
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()

			c.Advance(6*time.Hour + 30*time.Minute) // 06:30: 01:00 to 06:00 are due
			require.NoError(t, ctl.Trigger(ctx, "hourly", c.Now()))
			n, err := s.Tick(ctx)
			require.NoError(t, err)
			require.Equal(t, 6, n, "every missed slot of a CatchUp schedule: %v", emitted(t, db, "hourly"))
			got := emitted(t, db, "hourly")
			for h := 1; h <= 6; h++ {
				require.Equal(t, 1, got[time.Date(2025, 1, 1, h, 0, 0, 0, time.UTC).Format(time.RFC3339)], "slot %02d:00", h)
			}

			c.Advance(10 * time.Minute) // 06:40, next slot 07:00
			require.NoError(t, ctl.Trigger(ctx, "hourly", c.Now()))
			n, err = s.Tick(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "a schedule not yet due fires at once")
			require.Equal(t, 1, emitted(t, db, "hourly")["2025-01-01T06:40:00Z"], "the triggered slot is the time of the trigger")
			list, err := ctl.List(ctx)
			require.NoError(t, err)
			require.Equal(t, time.Date(2025, 1, 1, 7, 0, 0, 0, time.UTC), list[0].NextRunAt, "then back on the grid")
		})
	}
}

// TestTriggerRefusesAPausedSchedule on every store: a paused schedule
// does not fire, so a trigger on it is an error that says to resume it,
// and changes nothing; once resumed, a trigger fires it.
func TestTriggerRefusesAPausedSchedule(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			s := newScheduler(t, db, c, "a", scheduler.Schedule{Name: "daily", Every: 24 * time.Hour})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()

			require.NoError(t, ctl.Pause(ctx, "daily"))
			err = ctl.Trigger(ctx, "daily", c.Now())
			require.ErrorIs(t, err, schedcontrol.ErrPaused)
			require.EqualError(t, err, `scheduler: schedule "daily" is paused: resume it first`)
			c.Advance(time.Second)
			n, err := s.Tick(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			list, err := ctl.List(ctx)
			require.NoError(t, err)
			require.Equal(t, time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC), list[0].NextRunAt, "not triggered")

			require.NoError(t, ctl.Resume(ctx, "daily"))
			require.NoError(t, ctl.Trigger(ctx, "daily", c.Now()))
			n, err = s.Tick(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.ErrorContains(t, ctl.Trigger(ctx, "nope", c.Now()), `no schedule named "nope"`)
		})
	}
}

// TestAPauseBeforeTheClaimStopsTheFire on every store: a pause committed
// after a tick read the schedule as due and running, but before its
// claim, stops the fire; the slot then fires once resumed.
func TestAPauseBeforeTheClaimStopsTheFire(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			s := newScheduler(t, db, c, "a", scheduler.Schedule{Name: "hourly", Every: time.Hour})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()

			// The pause runs in the claim's transaction, just before the
			// claim: as if the operator's pause committed at that moment.
			var pauses atomic.Int32
			require.NoError(t, db.Callback().Raw().Before("gorm:raw").Register("test:pause_before_claim", func(tx *gorm.DB) {
				if sql := tx.Statement.SQL.String(); strings.Contains(sql, "SET next_run_at") && strings.Contains(sql, "last_fired_by") && pauses.Add(1) == 1 {
					_, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, "UPDATE "+scheduler.TableDefault+" SET paused = TRUE WHERE name = 'hourly'")
					require.NoError(t, err)
				}
			}))
			c.Advance(time.Hour + time.Minute)
			n, err := s.Tick(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, pauses.Load(), "the tick tried to claim the slot")
			require.Zero(t, n, "a pause before the claim stops the fire")
			require.Empty(t, emitted(t, db, "hourly"))

			require.NoError(t, ctl.Resume(ctx, "hourly"))
			n, err = s.Tick(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "resumed, the slot fires")
		})
	}
}

// TestPauseAndTriggerLogNoGormError on every store: pausing a paused
// schedule (MySQL then reads it back) and triggering a paused one must not
// read its state into a struct gorm cannot parse: gorm then prints
// "[error] failed to parse field: NextRunAt" through its global logger
// each time, though the command does what it should. Not parallel: it
// swaps gorm's global logger.
func TestPauseAndTriggerLogNoGormError(t *testing.T) {
	var said strings.Builder
	var mu sync.Mutex
	before := logger.Default
	logger.Default = logger.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return said.Write(p)
	}), logger.Config{LogLevel: logger.Warn})
	t.Cleanup(func() { logger.Default = before })
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			newScheduler(t, db, c, "a", scheduler.Schedule{Name: "daily", Every: 24 * time.Hour})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, ctl.Pause(ctx, "daily"))
			require.NoError(t, ctl.Pause(ctx, "daily"))
			require.ErrorIs(t, ctl.Trigger(ctx, "daily", c.Now()), schedcontrol.ErrPaused)
			require.NoError(t, ctl.Resume(ctx, "daily"))
			require.NoError(t, ctl.Resume(ctx, "daily"))
			require.ErrorContains(t, ctl.Pause(ctx, "nope"), `no schedule named "nope"`)
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, said.String())
			said.Reset() // each store says its own
		})
	}
}

type writerFunc func(p []byte) (int, error)

// Printf is gorm's logger.Writer.
func (w writerFunc) Printf(format string, args ...any) {
	_, _ = w([]byte(fmt.Sprintf(format, args...) + "\n"))
}

// TestAChangedTimingIsStoredAtDefine on every store: a schedule defined
// again with another timing (a deploy changed it from hourly to daily)
// keeps its name and takes the new spec and the new timing's next slot;
// the old timing's slots no longer fire. It catches a Define that keeps
// the stored timing, which no other test does.
func TestAChangedTimingIsStoredAtDefine(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
			newScheduler(t, db, c, "a", scheduler.Schedule{Name: "job", Every: time.Hour})
			c.Advance(30 * time.Minute)
			s := newScheduler(t, db, c, "b", scheduler.Schedule{Name: "job", Every: 24 * time.Hour})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()
			list, err := ctl.List(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			require.Equal(t, "every 24h0m0s", list[0].Spec)
			require.Equal(t, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), list[0].NextRunAt)

			c.Set(time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)) // the hourly slot
			n, err := s.Tick(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			c.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
			n, err = s.Tick(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		})
	}
}

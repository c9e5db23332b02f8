package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
			ctl, err := scheduler.NewControl(db, "")
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
			ctl, err := scheduler.NewControl(db, "")
			require.NoError(t, err)
			ctx := context.Background()

			require.NoError(t, ctl.Pause(ctx, "daily"))
			err = ctl.Trigger(ctx, "daily", c.Now())
			require.ErrorIs(t, err, scheduler.ErrPaused)
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

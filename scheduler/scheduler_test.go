package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/scheduler"
)

// clock is a fake clock shared by several schedulers.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// recordEmit writes each emitted slot in the claiming transaction.
func recordEmit(ctx context.Context, tx *gorm.DB, s scheduler.Schedule, slot time.Time) error {
	return tx.Exec("INSERT INTO emits (name, slot) VALUES (?, ?)", s.Name, slot.UTC().Format(time.RFC3339)).Error
}

func emitsTable(t *testing.T, db *gorm.DB) {
	require.NoError(t, db.Exec("CREATE TABLE emits (name VARCHAR(100) NOT NULL, slot VARCHAR(40) NOT NULL)").Error)
}

func emitted(t *testing.T, db *gorm.DB, name string) map[string]int {
	var rows []struct{ Slot string }
	require.NoError(t, db.Raw("SELECT slot FROM emits WHERE name = ?", name).Scan(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.Slot]++
	}
	return out
}

func newScheduler(t *testing.T, db *gorm.DB, c *clock, instance string, schedules ...scheduler.Schedule) *scheduler.Scheduler {
	s, err := scheduler.New(scheduler.Config{DB: db, Schedules: schedules, Emit: recordEmit, Instance: instance, Now: c.Now, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, s.Define(context.Background()))
	return s
}

// storeDSNs are the three stores by their DSNs, for tests that open
// several pools on one database (the server stores first).
var storeDSNs = []struct {
	name string
	dsn  func(testing.TB) string
}{{"postgres", testenv.PostgresSchemaDSN}, {"mariadb", testenv.MySQLDatabaseDSN}, {"sqlite", testenv.SQLiteDSN}}

// TestConformanceSchedulerOncePerSlot runs three schedulers, each on its
// own connection pool, on one database of each store through 30 simulated
// days, ticking concurrently, restarted every few simulated days: every
// slot fires exactly once.
func TestConformanceSchedulerOncePerSlot(t *testing.T) {
	for _, store := range storeDSNs {
		t.Run(store.name, func(t *testing.T) {
			dsn := store.dsn(t)
			oncePerSlot(t, testenv.Migrated(t, dsn, store.name), func() *gorm.DB { return testenv.Migrated(t, dsn, store.name) })
		})
	}
}

func oncePerSlot(t *testing.T, db *gorm.DB, open func() *gorm.DB) {
	emitsTable(t, db)
	start := time.Date(2026, 3, 1, 0, 17, 0, 0, time.UTC)
	c := &clock{}
	c.Set(start)
	hourly := scheduler.Schedule{Name: "hourly", Every: time.Hour, Missed: scheduler.CatchUp}
	halfHourly := scheduler.Schedule{Name: "cron", Cron: "*/30 * * * *", Missed: scheduler.CatchUp}
	pools := []*gorm.DB{open(), open(), open()}
	boot := func() []*scheduler.Scheduler {
		var out []*scheduler.Scheduler
		for i, pool := range pools {
			out = append(out, newScheduler(t, pool, c, fmt.Sprintf("instance-%d", i), hourly, halfHourly))
		}
		return out
	}
	instances := boot()
	rng := rand.New(rand.NewPCG(1, 2))
	end := start.Add(30 * 24 * time.Hour)
	for rounds := 0; c.Now().Before(end); rounds++ {
		c.Advance(time.Duration(rng.IntN(80)) * time.Minute)
		if rounds%97 == 96 {
			instances = boot() // a restart: new processes, the same table
		}
		var wg sync.WaitGroup
		for _, s := range instances {
			wg.Go(func() {
				_, err := s.Tick(context.Background())
				require.NoError(t, err)
			})
		}
		wg.Wait()
	}
	for _, tc := range []struct {
		name string
		step time.Duration
	}{{"hourly", time.Hour}, {"cron", 30 * time.Minute}} {
		got := emitted(t, db, tc.name)
		want := 0
		for slot := start.Truncate(tc.step).Add(tc.step); !slot.After(c.Now()); slot = slot.Add(tc.step) {
			want++
			require.Equal(t, 1, got[slot.Format(time.RFC3339)], "%s slot %s", tc.name, slot)
		}
		require.Len(t, got, want, "%s: no slot outside the schedule", tc.name)
	}
}

func TestMissedSlotPolicies(t *testing.T) {
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) // 10:00, next slot 11:00
	for _, tc := range []struct {
		policy scheduler.MissedPolicy
		want   []string
		missed int
	}{
		{scheduler.RunOnce, []string{"2026-03-01T11:00:00Z"}, 4},
		{scheduler.Skip, nil, 5},
		{scheduler.CatchUp, []string{"2026-03-01T13:00:00Z", "2026-03-01T14:00:00Z", "2026-03-01T15:00:00Z"}, 2},
	} {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			db := testenv.SQLite(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(start)
			var fires, missed int
			s, err := scheduler.New(scheduler.Config{DB: db, Emit: recordEmit, Instance: "a", Now: c.Now, Logger: testenv.Logger(t),
				Schedules: []scheduler.Schedule{{Name: "job", Every: time.Hour, Missed: tc.policy, CatchUpLimit: 3}},
				OnFire:    func(_ string, e, m int) { fires += e; missed += m }})
			require.NoError(t, err)
			require.NoError(t, s.Define(context.Background()))
			c.Set(start.Add(5*time.Hour + 30*time.Minute)) // 15:30: slots 11:00 to 15:00 missed
			_, err = s.Tick(context.Background())
			require.NoError(t, err)
			require.Equal(t, len(tc.want), fires)
			require.Equal(t, tc.missed, missed, "the five due slots, less those emitted")
			got := emitted(t, db, "job")
			require.Len(t, got, len(tc.want))
			for _, slot := range tc.want {
				require.Equal(t, 1, got[slot], slot)
			}
			// Whatever the policy, the schedule then continues: 16:00 fires.
			c.Set(start.Add(6 * time.Hour))
			n, err := s.Tick(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, 1, emitted(t, db, "job")["2026-03-01T16:00:00Z"])
		})
	}
}

func TestPauseResumeTriggerAndRestart(t *testing.T) {
	db := testenv.SQLite(t)
	emitsTable(t, db)
	c := &clock{}
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	c.Set(start)
	job := scheduler.Schedule{Name: "job", Every: time.Hour, Missed: scheduler.Skip}
	s := newScheduler(t, db, c, "a", job)
	ctl, err := schedcontrol.New(db, "")
	require.NoError(t, err)
	ctx := context.Background()

	require.NoError(t, ctl.Pause(ctx, "job"))
	c.Set(start.Add(time.Hour))
	n, err := s.Tick(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a paused schedule does not fire")

	require.NoError(t, ctl.Resume(ctx, "job"))
	n, err = s.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	require.NoError(t, ctl.Trigger(ctx, "job", c.Now().Add(time.Minute)))
	c.Advance(time.Minute)
	s = newScheduler(t, db, c, "b", job) // a restart keeps the triggered state
	n, err = s.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a triggered schedule fires at once")
	require.Error(t, ctl.Pause(ctx, "nope"))
}

// TestControlListsWhatTheTableHolds on every store: spec, next and last
// run, who fired it, paused.
func TestControlListsWhatTheTableHolds(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
			c.Set(start)
			s := newScheduler(t, db, c, "instance-a",
				scheduler.Schedule{Name: "hourly", Every: time.Hour},
				scheduler.Schedule{Name: "nightly", Cron: "0 3 * * *"})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, ctl.Pause(ctx, "nightly"))
			c.Set(start.Add(time.Hour))
			_, err = s.Tick(ctx)
			require.NoError(t, err)

			list, err := ctl.List(ctx)
			require.NoError(t, err)
			fired := start.Add(time.Hour)
			require.Equal(t, []schedcontrol.Stored{
				{Name: "hourly", Spec: "every 1h0m0s", NextRunAt: start.Add(2 * time.Hour), LastRunAt: &fired, LastFiredBy: "instance-a"},
				{Name: "nightly", Spec: "cron 0 3 * * *", NextRunAt: time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC), Paused: true},
			}, list)

			_, err = schedcontrol.New(db, "bad name")
			require.ErrorContains(t, err, "bad table name")
		})
	}
}

func TestBadSchedulesAreRefused(t *testing.T) {
	db := testenv.SQLite(t)
	_, err := scheduler.New(scheduler.Config{DB: db, Emit: recordEmit, Schedules: []scheduler.Schedule{
		{Name: "both", Every: time.Hour, Cron: "* * * * *"},
		{Name: "bad cron", Cron: "every tuesday"},
		{Name: "", Every: time.Hour},
	}})
	require.ErrorContains(t, err, "exactly one of Every")
	require.ErrorContains(t, err, "every tuesday")
	require.ErrorContains(t, err, "Schedule.Name")
}

// TestBadCatchUpAndNeverFiringCronAreRefused: accepted, a negative
// CatchUpLimit panics in Tick once the schedule is late (slice bounds out
// of range), and a cron expression that never fires (February 30) is
// stored with a zero next_run_at and fails every tick ("has no
// next_run_at").
func TestBadCatchUpAndNeverFiringCronAreRefused(t *testing.T) {
	db := testenv.SQLite(t)
	_, err := scheduler.New(scheduler.Config{DB: db, Emit: recordEmit, Schedules: []scheduler.Schedule{
		{Name: "negative", Every: time.Second, Missed: scheduler.CatchUp, CatchUpLimit: -1},
		{Name: "never", Cron: "0 0 30 2 *"},
	}})
	require.ErrorContains(t, err, "CatchUpLimit -1 is negative")
	require.ErrorContains(t, err, "never fires")
}

// TestControlTwiceIsNotAnError: pausing a paused schedule, resuming a
// running one and triggering one twice at the same time succeed on every
// store; only a name that does not exist is an error. MySQL counts only
// the rows an update changed, so on MariaDB a second pause changes none,
// which must not read as "no schedule named".
func TestControlTwiceIsNotAnError(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			emitsTable(t, db)
			c := &clock{}
			c.Set(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
			newScheduler(t, db, c, "a", scheduler.Schedule{Name: "job", Every: time.Hour})
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			ctx := context.Background()
			for range 2 {
				require.NoError(t, ctl.Pause(ctx, "job"))
			}
			for range 2 {
				require.NoError(t, ctl.Resume(ctx, "job"))
			}
			for range 2 {
				require.NoError(t, ctl.Trigger(ctx, "job", c.Now()))
			}
			require.ErrorContains(t, ctl.Pause(ctx, "nope"), `no schedule named "nope"`)
			require.ErrorContains(t, ctl.Trigger(ctx, "nope", c.Now()), `no schedule named "nope"`)
		})
	}
}

// TestAFailedEmitRollsBackItsClaim, on each store: the claim of a slot and
// its emit commit together. An emit that fails (the outbox's INSERT, the
// broker) leaves neither the emit's writes nor the claim, so the next tick
// fires the same slot once; a claim committed without its emit would lose
// the slot for good.
func TestAFailedEmitRollsBackItsClaim(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			emitsTable(t, db)
			start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
			c := &clock{}
			c.Set(start)
			failing := true
			emit := func(ctx context.Context, tx *gorm.DB, s scheduler.Schedule, slot time.Time) error {
				if err := recordEmit(ctx, tx, s, slot); err != nil {
					return err
				}
				if failing {
					return errors.New("broker refused the slot")
				}
				return nil
			}
			s, err := scheduler.New(scheduler.Config{DB: db, Emit: emit, Instance: "a", Now: c.Now, Logger: testenv.Logger(t),
				Schedules: []scheduler.Schedule{{Name: "job", Every: time.Hour}}})
			require.NoError(t, err)
			require.NoError(t, s.Define(context.Background()))
			c.Set(start.Add(time.Hour + time.Minute)) // 11:01: the 11:00 slot is due

			n, err := s.Tick(context.Background())
			require.ErrorContains(t, err, "broker refused the slot")
			require.Zero(t, n)
			require.Empty(t, emitted(t, db, "job"), "the failed emit's writes rolled back")
			ctl, err := schedcontrol.New(db, "")
			require.NoError(t, err)
			list, err := ctl.List(context.Background())
			require.NoError(t, err)
			require.Len(t, list, 1)
			require.True(t, list[0].NextRunAt.Equal(start.Add(time.Hour)), "the claim rolled back: 11:00 is still next, not %s", list[0].NextRunAt)

			failing = false
			n, err = s.Tick(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, map[string]int{"2026-03-01T11:00:00Z": 1}, emitted(t, db, "job"))
		})
	}
}

// TestSlotIDIsTheSameOnEveryInstance: a slot's message ID depends on the
// schedule and the slot alone (not on when, where or in which time zone it
// is emitted), so the inbox absorbs a slot emitted twice: its exact form
// is pinned.
func TestSlotIDIsTheSameOnEveryInstance(t *testing.T) {
	slot := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	berlin := time.FixedZone("CET", 3600)
	first := scheduler.SlotID("postroom.cleanup.billing", slot)
	require.Equal(t, first, scheduler.SlotID("postroom.cleanup.billing", slot.In(berlin)))
	require.Equal(t, "schedule:postroom.cleanup.billing:2026-03-01T11:00:00Z", first)
	require.NotEqual(t, first, scheduler.SlotID("postroom.cleanup.billing", slot.Add(time.Hour)))
	require.NotEqual(t, first, scheduler.SlotID("postroom.cleanup.shipping", slot))
}

// TestRunStoppedWhileStartingIsNotAnError: Run whose context ends before
// or while it starts returns nil, as it does when stopped later (a
// program that joins its Run errors on Ctrl-C, as the getting-started
// program does, would fail with "context canceled" when the stop comes
// while the scheduler waits for SQLite's one connection).
func TestRunStoppedWhileStartingIsNotAnError(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			s, err := scheduler.New(scheduler.Config{DB: db, Emit: recordEmit, Instance: "a", Logger: testenv.Logger(t),
				Schedules: []scheduler.Schedule{{Name: "job", Every: time.Hour}}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			require.NoError(t, s.Run(ctx))
		})
	}
}

package dialect_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

func (e *env) schedules() dialect.ScheduleStatements {
	e.t.Helper()
	s, err := e.d.Schedules(e.tables.Schedules)
	require.NoError(e.t, err)
	return s
}

// state runs State: next_run_at and paused.
func (e *env) state(s dialect.ScheduleStatements, name string) (time.Time, bool) {
	e.t.Helper()
	var next any
	var paused bool
	e.scan(s.State, []any{name}, &next, &paused)
	return e.parse(next), paused
}

func TestStatementsScheduleInsertAndRedefine(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.schedules()
		slot := t0.Add(time.Hour)
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "nightly", "@daily", e.tm(slot), e.tm(t0)))
		e.exec(e.db, s.Insert, "nightly", "@hourly", e.tm(t0), e.tm(t0)) // no error
		var spec string
		e.scan("SELECT spec FROM "+e.tables.Schedules+" WHERE name = ?", []any{"nightly"}, &spec)
		require.Equal(t, "@daily", spec, "an existing schedule is left as it is")
		next, paused := e.state(s, "nightly")
		require.Equal(t, slot.Truncate(time.Microsecond), next)
		require.False(t, paused, "a new schedule runs")
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "Nightly", "@hourly", e.tm(slot), e.tm(t0)), "names compare bytes")
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "nightly ", "@hourly", e.tm(slot), e.tm(t0)))

		require.EqualValues(t, 0, e.exec(e.db, s.Redefine, "@daily", e.tm(t0), e.tm(t0), "nightly", "@daily"), "the same spec")
		require.EqualValues(t, 1, e.exec(e.db, s.Redefine, "@every 1m", e.tm(t0.Add(time.Minute)), e.tm(t0), "nightly", "@every 1m"))
		next, _ = e.state(s, "nightly")
		require.Equal(t, t0.Add(time.Minute).Truncate(time.Microsecond), next, "a new spec, a new next slot")
		require.EqualValues(t, 0, e.exec(e.db, s.Redefine, "@every 1m", e.tm(t0), e.tm(t0), "none", "@every 1m"), "no such schedule")

		rows, err := e.db.Raw(s.List).Rows()
		require.NoError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var name, spec, firedBy string
			var next, last any
			var paused bool
			require.NoError(t, rows.Scan(&name, &spec, &next, &last, &firedBy, &paused))
			require.Nil(t, last, "never run")
			require.Empty(t, firedBy)
			names = append(names, name)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"Nightly", "nightly", "nightly "}, names, "by name, as bytes")
	})
}

// Claim moves next_run_at forward only if it still holds the value read
// and the schedule is not paused: one instance owns each slot.
func TestStatementsScheduleClaimOncePerSlot(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.schedules()
		slot, next := t0, t0.Add(time.Minute)
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "job", "@every 1m", e.tm(slot), e.tm(t0)))
		require.EqualValues(t, 0, e.exec(e.db, s.Claim, e.tm(next), e.tm(t0), "i1", e.tm(t0), "job", e.tm(slot.Add(time.Microsecond))),
			"a slot read a microsecond off")
		require.EqualValues(t, 1, e.exec(e.db, s.Claim, e.tm(next), e.tm(t0), "i1", e.tm(t0), "job", e.tm(slot)))
		require.EqualValues(t, 0, e.exec(e.db, s.Claim, e.tm(next), e.tm(t0), "i2", e.tm(t0), "job", e.tm(slot)), "the slot is taken")
		var last any
		var firedBy string
		e.scan("SELECT last_run_at, last_fired_by FROM "+e.tables.Schedules+" WHERE name = ?", []any{"job"}, &last, &firedBy)
		require.Equal(t, t0.Truncate(time.Microsecond), e.parse(last))
		require.Equal(t, "i1", firedBy)
		got, _ := e.state(s, "job")
		require.Equal(t, next.Truncate(time.Microsecond), got)

		// Instances racing for the next slot: exactly one wins.
		const n = 8
		var wg sync.WaitGroup
		type result struct {
			rows int64
			err  error
		}
		results := make(chan result, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := e.db.Exec(s.Claim, e.tm(next.Add(time.Minute)), e.tm(next), "racer", e.tm(next), "job", e.tm(next))
				results <- result{res.RowsAffected, res.Error}
			}()
		}
		wg.Wait()
		close(results)
		var won int64
		for r := range results {
			require.NoError(t, r.err)
			won += r.rows
		}
		require.EqualValues(t, 1, won, "one claim of the slot among %d", n)
	})
}

// A paused schedule is neither claimed nor triggered; SetPaused and State
// say so.
func TestStatementsSchedulePauseAndTrigger(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.schedules()
		slot := t0.Add(time.Hour)
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "job", "@hourly", e.tm(slot), e.tm(t0)))

		require.EqualValues(t, 0, e.exec(e.db, s.Trigger, e.tm(slot.Add(time.Second)), "job", e.tm(slot.Add(time.Second))),
			"due earlier already: it keeps its oldest slot")
		require.EqualValues(t, 0, e.exec(e.db, s.Trigger, e.tm(slot), "job", e.tm(slot)), "due then already")
		require.EqualValues(t, 1, e.exec(e.db, s.Trigger, e.tm(t0), "job", e.tm(t0)))
		next, _ := e.state(s, "job")
		require.Equal(t, t0.Truncate(time.Microsecond), next)

		require.EqualValues(t, 1, e.exec(e.db, s.SetPaused, true, "job"))
		next, paused := e.state(s, "job")
		require.True(t, paused)
		require.EqualValues(t, 0, e.exec(e.db, s.Claim, e.tm(slot), e.tm(t0), "i", e.tm(t0), "job", e.tm(next)), "paused: not claimed")
		require.EqualValues(t, 0, e.exec(e.db, s.Trigger, e.tm(t0.Add(-time.Hour)), "job", e.tm(t0.Add(-time.Hour))), "paused: not triggered")
		if s.Lock != "" {
			var names []string
			require.NoError(t, e.db.Raw(s.Lock, "job", e.tm(next)).Scan(&names).Error)
			require.Empty(t, names, "paused: not locked")
		}
		require.EqualValues(t, 1, e.exec(e.db, s.SetPaused, false, "job"))
		_, paused = e.state(s, "job")
		require.False(t, paused)
		require.EqualValues(t, 1, e.exec(e.db, s.Claim, e.tm(slot), e.tm(t0), "i", e.tm(t0), "job", e.tm(next)), "resumed")
		require.EqualValues(t, 0, e.exec(e.db, s.SetPaused, true, "JOB"), "no such schedule")
	})
}

// Lock locks a schedule's row at the slot read, skipping a row another
// instance's claim holds; SQLite needs none.
func TestStatementsScheduleLockSkipsAHeldRow(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s := e.schedules()
		if e.d == (sqlite.Dialect{}) {
			require.Empty(t, s.Lock, "SQLite locks the whole database for a write")
			t.Skip("SQLite has one writer: no row lock to skip")
		}
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "job", "@hourly", e.tm(t0), e.tm(t0)))
		require.EqualValues(t, 1, e.exec(e.db, s.Insert, "other", "@hourly", e.tm(t0), e.tm(t0)))
		holder := e.begin()
		var names []string
		require.NoError(t, holder.Raw(s.Lock, "job", e.tm(t0)).Scan(&names).Error)
		require.Equal(t, []string{"job"}, names)

		other := e.begin()
		names = nil
		require.NoError(t, other.Raw(s.Lock, "job", e.tm(t0)).Scan(&names).Error)
		require.Empty(t, names, "held by the other instance's claim: skipped, not waited for")
		names = nil
		require.NoError(t, other.Raw(s.Lock, "other", e.tm(t0)).Scan(&names).Error)
		require.Equal(t, []string{"other"}, names, "another schedule is not held up")
		names = nil
		require.NoError(t, other.Raw(s.Lock, "other", e.tm(t0.Add(time.Minute))).Scan(&names).Error)
		require.Empty(t, names, "a slot read before another claim moved it")

		require.EqualValues(t, 1, e.exec(holder, s.Claim, e.tm(t0.Add(time.Hour)), e.tm(t0), "i1", e.tm(t0), "job", e.tm(t0)))
		require.NoError(t, holder.Commit().Error)
		names = nil
		require.NoError(t, other.Raw(s.Lock, "job", e.tm(t0)).Scan(&names).Error)
		require.Empty(t, names, "claimed by the holder: the slot moved")
		require.NoError(t, other.Rollback().Error)
	})
}

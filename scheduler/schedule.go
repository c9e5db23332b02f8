package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// MissedPolicy says what to do with slots that passed while no instance ran.
type MissedPolicy int

const (
	// RunOnce emits one slot for all the missed ones, the first of them
	// (its time and SlotID), then continues on the schedule.
	RunOnce MissedPolicy = iota
	// Skip emits none of the missed slots; the next slot on the schedule fires.
	Skip
	// CatchUp emits every missed slot, at most Schedule.CatchUpLimit of them.
	CatchUp
)

// String names the policy, for logs.
func (p MissedPolicy) String() string {
	switch p {
	case RunOnce:
		return "RunOnce"
	case Skip:
		return "Skip"
	case CatchUp:
		return "CatchUp"
	}
	return fmt.Sprintf("MissedPolicy(%d)", int(p))
}

// CatchUpLimitDefault bounds the slots CatchUp emits at once.
const CatchUpLimitDefault = 100

// Schedule is one named, recurring task.
type Schedule struct {
	// Name identifies the schedule across restarts and instances. Required.
	Name string
	// Every fires at multiples of this interval since Go's zero time
	// (time.Truncate), so all instances agree on the slots (an interval
	// dividing a day fires at the same UTC times daily). Set Every or Cron.
	Every time.Duration
	// Cron fires on a five-field cron expression, in UTC unless it starts
	// with CRON_TZ=<IANA zone> (robfig/cron's ParseStandard; "@every 5m"
	// and the other descriptors work too, @every rounded up to whole
	// seconds). Set Every or Cron.
	Cron string
	// Missed is the policy for missed slots. Defaults to RunOnce.
	Missed MissedPolicy
	// CatchUpLimit bounds the slots CatchUp emits. Defaults to 100.
	CatchUpLimit int

	cron cron.Schedule
}

func (s *Schedule) prepare() error {
	var errs []error
	if s.Name == "" || len(s.Name) > 150 {
		errs = append(errs, errors.New("scheduler: Schedule.Name must have 1 to 150 bytes"))
	}
	switch {
	case (s.Every > 0) == (s.Cron != ""):
		errs = append(errs, fmt.Errorf("scheduler: schedule %q: set exactly one of Every (positive) and Cron", s.Name))
	case s.Cron != "":
		c, err := cron.ParseStandard(s.Cron)
		if err != nil {
			errs = append(errs, fmt.Errorf("scheduler: schedule %q: cron %q: %w", s.Name, s.Cron, err))
		} else if c.Next(time.Now()).IsZero() {
			// robfig/cron gives up after five years (February 30): a zero
			// next_run_at would fail every tick.
			errs = append(errs, fmt.Errorf("scheduler: schedule %q: cron %q never fires", s.Name, s.Cron))
		}
		s.cron = c
	case s.Every < time.Second:
		errs = append(errs, fmt.Errorf("scheduler: schedule %q: Every %s is shorter than a second", s.Name, s.Every))
	}
	if s.CatchUpLimit < 0 {
		// slots() would panic in Tick, on every instance.
		errs = append(errs, fmt.Errorf("scheduler: schedule %q: CatchUpLimit %d is negative", s.Name, s.CatchUpLimit))
	}
	if s.CatchUpLimit == 0 {
		s.CatchUpLimit = CatchUpLimitDefault
	}
	return errors.Join(errs...)
}

// spec is the stored text of the schedule's timing.
func (s *Schedule) spec() string {
	if s.Cron != "" {
		return "cron " + s.Cron
	}
	return "every " + s.Every.String()
}

// next returns the first slot strictly after t.
func (s *Schedule) next(t time.Time) time.Time {
	t = t.UTC()
	if s.cron != nil {
		return s.cron.Next(t)
	}
	return t.Truncate(s.Every).Add(s.Every)
}

// slots returns what to emit for a due slot at time now, and the next slot.
func (s *Schedule) slots(due, now time.Time) (emit []time.Time, next time.Time, missed int) {
	next = s.next(now)
	following := s.next(due)
	if following.After(now) {
		return []time.Time{due}, next, 0
	}
	// More than one slot is due: some were missed.
	switch s.Missed {
	case Skip:
	case CatchUp:
		for t := due; !t.IsZero() && !t.After(now); t = s.next(t) {
			emit = append(emit, t)
		}
		if len(emit) > s.CatchUpLimit {
			emit = emit[len(emit)-s.CatchUpLimit:]
		}
	default:
		emit = []time.Time{due}
	}
	return emit, next, s.countDue(due, now) - len(emit)
}

// maxCounted bounds countDue on a schedule that was stopped for long.
const maxCounted = 1_000_000

// countDue counts the slots from due to now, at most maxCounted.
func (s *Schedule) countDue(due, now time.Time) int {
	n := 0
	for t := due; !t.IsZero() && !t.After(now) && n < maxCounted; t = s.next(t) {
		n++
	}
	return n
}

// SlotID is the deterministic message ID of a schedule's slot, the same on
// every instance, so the inbox absorbs a repeated emit.
func SlotID(name string, slot time.Time) string {
	return "schedule:" + name + ":" + slot.UTC().Format(time.RFC3339)
}

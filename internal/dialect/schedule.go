package dialect

// ScheduleStatements are the statements on one schedules table.
type ScheduleStatements struct {
	// Insert adds a schedule unless its name exists (name, spec, next_run_at, updated_at).
	Insert string
	// Redefine stores a schedule's new spec and next slot if its spec
	// changed. Arguments: spec, next_run_at, updated_at, name, spec.
	Redefine string
	// Lock locks a schedule's row if it still holds the next_run_at read
	// and is not paused, skipping a row another instance holds (no row:
	// do not fire now), so one hanging emit cannot stop every schedule on
	// every instance. Empty on SQLite. Arguments: name, old next_run_at.
	Lock string
	// Claim moves next_run_at forward only if it still holds the value read
	// and is not paused (compare-and-set): one row affected means this
	// instance owns the slot. Arguments: new next_run_at, last_run_at,
	// last_fired_by, updated_at, name, old next_run_at.
	Claim string
	// State reads a schedule's next_run_at and paused. Argument: name.
	State string
	// SetPaused pauses or resumes a schedule. Arguments: paused, name.
	SetPaused string
	// Trigger makes a schedule due at a time unless due earlier already (a
	// late one keeps its oldest slot, for its missed-slot policy) or
	// paused. Arguments: next_run_at, name, next_run_at.
	Trigger string
	// List reads every schedule, by name.
	List string
}

// SchedulesOn validates table and returns its statements: skip ends Insert
// (no row for an existing name); lock ends Lock's read ("": no Lock).
func SchedulesOn(table, skip, lock string) (ScheduleStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return ScheduleStatements{}, err
	}
	if lock != "" {
		lock = "SELECT name FROM " + table + " WHERE name = ? AND next_run_at = ? AND paused = FALSE" + lock
	}
	return ScheduleStatements{
		Insert:    "INSERT INTO " + table + " (name, spec, next_run_at, updated_at) VALUES (?, ?, ?, ?)" + skip,
		Lock:      lock,
		Redefine:  "UPDATE " + table + " SET spec = ?, next_run_at = ?, updated_at = ? WHERE name = ? AND spec <> ?",
		Claim:     "UPDATE " + table + " SET next_run_at = ?, last_run_at = ?, last_fired_by = ?, updated_at = ? WHERE name = ? AND next_run_at = ? AND paused = FALSE",
		State:     "SELECT next_run_at, paused FROM " + table + " WHERE name = ?",
		SetPaused: "UPDATE " + table + " SET paused = ? WHERE name = ?",
		Trigger:   "UPDATE " + table + " SET next_run_at = ? WHERE name = ? AND next_run_at > ? AND paused = FALSE",
		List:      "SELECT name, spec, next_run_at, last_run_at, last_fired_by, paused FROM " + table + " ORDER BY name",
	}, nil
}

package dialect

// ScheduleInsert inserts a schedule unless one of that name exists.
// Arguments: name, spec, next_run_at, updated_at.
func (d Dialect) ScheduleInsert(table string) string {
	insert := "INSERT INTO " + table + " (name, spec, next_run_at, updated_at) VALUES (?, ?, ?, ?)"
	if d == MySQL {
		return insert + " ON DUPLICATE KEY UPDATE name = name"
	}
	return insert + " ON CONFLICT DO NOTHING"
}

// ScheduleClaim moves a schedule's next_run_at forward only if it still
// holds the value read (compare-and-set): one row affected means this
// instance owns the slot. Arguments: new next_run_at, last_run_at,
// last_fired_by, updated_at, name, old next_run_at.
func (d Dialect) ScheduleClaim(table string) string {
	return "UPDATE " + table + " SET next_run_at = ?, last_run_at = ?, last_fired_by = ?, updated_at = ? WHERE name = ? AND next_run_at = ?"
}

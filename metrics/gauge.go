package metrics

// Gauge names a level postroom reports, as opposed to an event it counts.
type Gauge string

// The gauges postroom sets.
const (
	OutboxBacklog     Gauge = "postroom_outbox_backlog"      // messages committed to the outbox, not yet relayed
	OutboxLagSeconds  Gauge = "postroom_outbox_lag_seconds"  // age of the oldest of them
	CleanupLagSeconds Gauge = "postroom_cleanup_lag_seconds" // how far the oldest inbox key is past the retention (0: on time)
)

// TableRows is the gauge of a table's row count (an estimate on large
// PostgreSQL and MySQL tables).
func TableRows(table string) Gauge { return Gauge(`postroom_table_rows{table="` + table + `"}`) }

// TableOldestSeconds is the gauge of the age of a table's oldest row.
func TableOldestSeconds(table string) Gauge {
	return Gauge(`postroom_table_oldest_row_age_seconds{table="` + table + `"}`)
}

// Count names a running total postroom reports that is not per handler
// and event (a Prometheus counter, with its labels in the name).
type Count string

// CleanupDeleted counts the rows cleanup deleted from a table.
func CleanupDeleted(table string) Count {
	return Count(`postroom_cleanup_deleted_rows_total{table="` + table + `"}`)
}

// ScheduleFires counts the slots a schedule emitted on this instance.
func ScheduleFires(schedule string) Count {
	return Count(`postroom_schedule_fires_total{schedule="` + schedule + `"}`)
}

// ScheduleMissed counts the slots a schedule's missed-slot policy left out.
func ScheduleMissed(schedule string) Count {
	return Count(`postroom_schedule_missed_slots_total{schedule="` + schedule + `"}`)
}

// GaugeSetter is implemented by a Recorder that also keeps levels; the bus
// sets its gauges on a Recorder that implements it.
type GaugeSetter interface {
	SetGauge(g Gauge, value float64)
}

// Adder is implemented by a Recorder that also keeps running totals.
type Adder interface {
	Add(c Count, delta float64)
}

// Add adds delta to c.
func (c *Counters) Add(name Count, delta float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[Count]float64{}
	}
	c.counts[name] += delta
}

// SetGauge sets g to value.
func (c *Counters) SetGauge(g Gauge, value float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gauges == nil {
		c.gauges = map[Gauge]float64{}
	}
	c.gauges[g] = value
}

// GetGauge returns the last value of g, and whether it was set.
func (c *Counters) GetGauge(g Gauge) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.gauges[g]
	return v, ok
}

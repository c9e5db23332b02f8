package metrics

import (
	"math"

	"github.com/postroom/postroom/internal/metricseries"
)

// Gauge names a level postroom reports, as opposed to an event it counts:
// a metric and, for some, the value of its one label. The zero Gauge names
// nothing and is not served.
type Gauge metricseries.Series

// Name returns the metric's name, such as "postroom_table_rows".
func (g Gauge) Name() string { return metricseries.Series(g).Name() }

// Label returns the name and value of the metric's one label, such as
// "table" and "postroom_inbox", or two empty strings for a metric without
// labels.
func (g Gauge) Label() (name, value string) { return metricseries.Series(g).Label() }

// Count names a running total postroom reports that is not per handler
// and event (a Prometheus counter): a metric and the value of its one
// label. The zero Count names nothing and is not served.
type Count metricseries.Series

// Name returns the metric's name, such as "postroom_schedule_fires_total".
func (c Count) Name() string { return metricseries.Series(c).Name() }

// Label returns the name and value of the metric's one label, such as
// "schedule" and "postroom.cleanup.billing".
func (c Count) Label() (name, value string) { return metricseries.Series(c).Label() }

// GaugeSetter is implemented by a Recorder that also keeps levels. A value
// of Unknown (NaN) says the read failed: Counters then leaves the series
// out of scrapes until set again, so dashboards show a gap and absence
// alerts fire, instead of a stale value.
type GaugeSetter interface {
	SetGauge(g Gauge, value float64)
}

// Unknown (NaN) is the value of a gauge whose level is not known.
var Unknown = math.NaN()

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

// SetGauge sets g to value; Unknown (NaN) unsets it.
func (c *Counters) SetGauge(g Gauge, value float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if math.IsNaN(value) {
		delete(c.gauges, g)
		return
	}
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

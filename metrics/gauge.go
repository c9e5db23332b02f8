package metrics

// Gauge names a level postroom reports, as opposed to an event it counts.
type Gauge string

// The gauges postroom sets.
const (
	OutboxBacklog    Gauge = "postroom_outbox_backlog"     // messages committed to the outbox, not yet relayed
	OutboxLagSeconds Gauge = "postroom_outbox_lag_seconds" // age of the oldest of them
)

// GaugeSetter is implemented by a Recorder that also keeps levels; the bus
// sets its gauges on a Recorder that implements it.
type GaugeSetter interface {
	SetGauge(g Gauge, value float64)
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

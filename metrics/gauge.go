package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// family is one of postroom's metrics other than postroom_messages_total:
// its name, its one label's name (or none) and its Prometheus description.
type family struct {
	name  string
	label string
	typ   prometheus.ValueType
	desc  *prometheus.Desc
}

func newFamily(typ prometheus.ValueType, name, label, help string) *family {
	var labels []string
	if label != "" {
		labels = []string{label}
	}
	return &family{name: name, label: label, typ: typ, desc: prometheus.NewDesc(name, help, labels, nil)}
}

var (
	outboxBacklog = newFamily(prometheus.GaugeValue, "postroom_outbox_backlog", "",
		"Messages committed to the outbox and not yet relayed.")
	outboxLag = newFamily(prometheus.GaugeValue, "postroom_outbox_lag_seconds", "",
		"Age of the oldest message committed to the outbox and not yet relayed.")
	cleanupLag = newFamily(prometheus.GaugeValue, "postroom_cleanup_lag_seconds", "",
		"How far the oldest inbox key is past the retention (0: cleanup keeps up).")
	tableRows = newFamily(prometheus.GaugeValue, "postroom_table_rows", "table",
		"Rows of a postroom table (the planner's estimate on large PostgreSQL and MySQL tables).")
	tableOldest = newFamily(prometheus.GaugeValue, "postroom_table_oldest_row_age_seconds", "table",
		"Age of the oldest row of a postroom table.")
	cleanupDeleted = newFamily(prometheus.CounterValue, "postroom_cleanup_deleted_rows_total", "table",
		"Rows cleanup deleted from a table on this instance.")
	scheduleFires = newFamily(prometheus.CounterValue, "postroom_schedule_fires_total", "schedule",
		"Slots a schedule emitted on this instance.")
	scheduleMissed = newFamily(prometheus.CounterValue, "postroom_schedule_missed_slots_total", "schedule",
		"Slots a schedule's missed-slot policy left out on this instance.")
	delayedMessages = newFamily(prometheus.GaugeValue, "postroom_delayed_messages", "",
		"Messages waiting in the delayed table (later deliveries and delayed retries).")
	delayedOverdue = newFamily(prometheus.GaugeValue, "postroom_delayed_overdue_seconds", "",
		"How far the earliest waiting delayed message is past its due time (0: none is late).")
	rateLimited = newFamily(prometheus.GaugeValue, "postroom_rate_limited", "handler",
		"1 while a handler is rate limited after consecutive failures to reach its database, else 0.")
	transportConnected = newFamily(prometheus.GaugeValue, "postroom_transport_connected", "",
		"1 while every connection of the bus's transport to its broker is up (RabbitMQ), else 0.")

	// families are the metrics above, in the order Describe lists them.
	families = []*family{outboxBacklog, outboxLag, cleanupLag, tableRows, tableOldest, cleanupDeleted, scheduleFires, scheduleMissed, rateLimited, delayedMessages, delayedOverdue, transportConnected}
)

// series is one series of a family: the family and its label's value.
type series struct {
	fam   *family
	value string
}

func (s series) name() string {
	if s.fam == nil {
		return ""
	}
	return s.fam.name
}

func (s series) label() (name, value string) {
	if s.fam == nil || s.fam.label == "" {
		return "", ""
	}
	return s.fam.label, s.value
}

// Gauge names a level postroom reports, as opposed to an event it counts:
// a metric and, for some, the value of its one label. The zero Gauge names
// nothing and is not served.
type Gauge struct{ s series }

// Name returns the metric's name, such as "postroom_table_rows".
func (g Gauge) Name() string { return g.s.name() }

// Label returns the name and value of the metric's one label, such as
// "table" and "postroom_inbox", or two empty strings for a metric without
// labels.
func (g Gauge) Label() (name, value string) { return g.s.label() }

// The gauges postroom sets that have no label.
var (
	// OutboxBacklog is the number of messages committed to the outbox, not yet relayed.
	OutboxBacklog = Gauge{series{fam: outboxBacklog}}
	// OutboxLagSeconds is the age of the oldest of them.
	OutboxLagSeconds = Gauge{series{fam: outboxLag}}
	// CleanupLagSeconds is how far the oldest inbox key is past the retention (0: on time).
	CleanupLagSeconds = Gauge{series{fam: cleanupLag}}
	// DelayedMessages is the number of messages waiting in the delayed table.
	DelayedMessages = Gauge{series{fam: delayedMessages}}
	// DelayedOverdueSeconds is how far the earliest of them is past its due
	// time (0: none is late).
	DelayedOverdueSeconds = Gauge{series{fam: delayedOverdue}}
	// TransportConnected is 1 while every connection of the transport to
	// its broker is up, else 0 (transport.Connectivity; RabbitMQ).
	TransportConnected = Gauge{series{fam: transportConnected}}
)

// TableRows is the gauge of a table's row count (an estimate on large
// PostgreSQL and MySQL tables).
func TableRows(table string) Gauge { return Gauge{series{tableRows, table}} }

// TableOldestSeconds is the gauge of the age of a table's oldest row.
func TableOldestSeconds(table string) Gauge { return Gauge{series{tableOldest, table}} }

// RateLimited is the gauge of whether a handler is rate limited (1) or not
// (0): see bus.Config.RateLimit.
func RateLimited(handler string) Gauge { return Gauge{series{rateLimited, handler}} }

// Count names a running total postroom reports that is not per handler
// and event (a Prometheus counter): a metric and the value of its one
// label. The zero Count names nothing and is not served.
type Count struct{ s series }

// Name returns the metric's name, such as "postroom_schedule_fires_total".
func (c Count) Name() string { return c.s.name() }

// Label returns the name and value of the metric's one label, such as
// "schedule" and "postroom.cleanup.billing".
func (c Count) Label() (name, value string) { return c.s.label() }

// CleanupDeleted counts the rows cleanup deleted from a table.
func CleanupDeleted(table string) Count { return Count{series{cleanupDeleted, table}} }

// ScheduleFires counts the slots a schedule emitted on this instance.
func ScheduleFires(schedule string) Count { return Count{series{scheduleFires, schedule}} }

// ScheduleMissed counts the slots a schedule's missed-slot policy left out.
func ScheduleMissed(schedule string) Count { return Count{series{scheduleMissed, schedule}} }

// GaugeSetter is implemented by a Recorder that also keeps levels; the bus
// sets its gauges on a Recorder that implements it. A value of NaN
// (Unknown) says the level is not known: the read that sets it failed (the
// database out of reach). Counters then leaves the series out of a scrape
// until it is set again, so that a dashboard shows a gap and an alert on
// its absence fires, instead of the last value read (an outbox backlog
// frozen at 0 through an outage).
type GaugeSetter interface {
	SetGauge(g Gauge, value float64)
}

// Unknown is the value of a gauge whose level is not known (see
// GaugeSetter): NaN.
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

// Package metricseries defines postroom's metrics other than
// postroom_messages_total, and the series the bus sets and adds to:
// metrics.Gauge and metrics.Count are a Series each.
package metricseries

import "github.com/prometheus/client_golang/prometheus"

// Family is one of postroom's metrics other than postroom_messages_total:
// its name, its one label's name (or none) and its Prometheus description.
type Family struct {
	Name  string
	Label string
	Type  prometheus.ValueType
	Desc  *prometheus.Desc
}

func newFamily(typ prometheus.ValueType, name, label, help string) *Family {
	var labels []string
	if label != "" {
		labels = []string{label}
	}
	return &Family{Name: name, Label: label, Type: typ, Desc: prometheus.NewDesc(name, help, labels, nil)}
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

	// Families are the metrics above, in the order Describe lists them.
	Families = []*Family{outboxBacklog, outboxLag, cleanupLag, tableRows, tableOldest, cleanupDeleted, scheduleFires, scheduleMissed, rateLimited, delayedMessages, delayedOverdue, transportConnected}
)

// Series is one series of a family: the family and its label's value. The
// zero Series names nothing.
type Series struct {
	fam   *Family
	value string
}

// Family returns the series' family, nil for the zero Series.
func (s Series) Family() *Family { return s.fam }

// Value returns the value of the family's label.
func (s Series) Value() string { return s.value }

// Name returns the metric's name, "" for the zero Series.
func (s Series) Name() string {
	if s.fam == nil {
		return ""
	}
	return s.fam.Name
}

// Label returns the name and value of the metric's one label, or two empty
// strings for a metric without labels.
func (s Series) Label() (name, value string) {
	if s.fam == nil || s.fam.Label == "" {
		return "", ""
	}
	return s.fam.Label, s.value
}

// The gauges postroom sets that have no label.
var (
	// OutboxBacklog is the number of messages committed to the outbox, not yet relayed.
	OutboxBacklog = Series{fam: outboxBacklog}
	// OutboxLagSeconds is the age of the oldest of them.
	OutboxLagSeconds = Series{fam: outboxLag}
	// CleanupLagSeconds is how far the oldest inbox key is past the retention (0: on time).
	CleanupLagSeconds = Series{fam: cleanupLag}
	// DelayedMessages is the number of messages waiting in the delayed table.
	DelayedMessages = Series{fam: delayedMessages}
	// DelayedOverdueSeconds is how far the earliest of them is past its due
	// time (0: none is late).
	DelayedOverdueSeconds = Series{fam: delayedOverdue}
	// TransportConnected is 1 while every connection of the transport to
	// its broker is up, else 0 (transport.Connectivity; RabbitMQ).
	TransportConnected = Series{fam: transportConnected}
)

// TableRows is the gauge of a table's row count (an estimate on large
// PostgreSQL and MySQL tables).
func TableRows(table string) Series { return Series{tableRows, table} }

// TableOldestSeconds is the gauge of the age of a table's oldest row.
func TableOldestSeconds(table string) Series { return Series{tableOldest, table} }

// RateLimited is the gauge of whether a handler is rate limited (1) or not
// (0): see bus.Config.RateLimit.
func RateLimited(handler string) Series { return Series{rateLimited, handler} }

// CleanupDeleted counts the rows cleanup deleted from a table.
func CleanupDeleted(table string) Series { return Series{cleanupDeleted, table} }

// ScheduleFires counts the slots a schedule emitted on this instance.
func ScheduleFires(schedule string) Series { return Series{scheduleFires, schedule} }

// ScheduleMissed counts the slots a schedule's missed-slot policy left out.
func ScheduleMissed(schedule string) Series { return Series{scheduleMissed, schedule} }

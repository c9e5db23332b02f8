// Package metrics counts what happens to messages, per handler, behind the
// small [Recorder] interface that postroom's middlewares and bus write to.
//
// # Prometheus
//
// [Counters], the default Recorder, keeps its counts and levels in memory
// and is a [prometheus.Collector]: register it on a client_golang registry
// and serve that registry with promhttp (the bus does this on
// Config.Metrics.Addr, together with Watermill's router metrics). It serves
//
//   - postroom_messages_total{handler, event}: one counter per [Event];
//   - the levels of [Gauge] (outbox backlog and lag, table rows and ages,
//     cleanup lag, delayed messages, rate limiting, the transport's
//     connections), a level whose read failed left out ([Unknown]);
//   - the running totals of [Count] (rows cleanup deleted, schedule slots
//     fired and missed).
//
// # Other metrics systems
//
// Implement [Recorder] (and [GaugeSetter] and [Adder] for the levels and
// totals) and pass it where a Recorder is taken. [Gauge.Name] and
// [Gauge.Label] (and the same on [Count]) give each series' metric name
// and label, so an exporter needs no parsing.
package metrics

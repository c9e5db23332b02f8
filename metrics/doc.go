// Package metrics counts what happens to messages, per handler, behind the
// small [Recorder] interface that postroom's middlewares and bus write to and
// that an exporter (Prometheus, OpenTelemetry) can implement or read.
package metrics

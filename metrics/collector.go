package metrics

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postroom/postroom/internal/metricseries"
)

var messagesTotal = prometheus.NewDesc("postroom_messages_total",
	"Messages per handler and outcome (event).", []string{"handler", "event"}, nil)

// Describe sends the description of every metric Counters serves, so a
// registry checks what Collect sends against it.
func (c *Counters) Describe(ch chan<- *prometheus.Desc) {
	ch <- messagesTotal
	for _, f := range metricseries.Families {
		ch <- f.Desc
	}
}

// Collect sends the current counts, levels and running totals: a counter
// postroom_messages_total{handler, event} per handler and event recorded,
// and one series per Gauge set and per Count added to.
func (c *Counters) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.n.Range {
		k := k.(eventKey)
		send(ch, messagesTotal, prometheus.CounterValue, float64(n.(*atomic.Uint64).Load()), k.handler, string(k.event))
	}
	type level struct {
		s metricseries.Series
		v float64
	}
	var levels []level
	c.mu.Lock()
	for g, v := range c.gauges {
		levels = append(levels, level{metricseries.Series(g), v})
	}
	for n, v := range c.counts {
		levels = append(levels, level{metricseries.Series(n), v})
	}
	c.mu.Unlock()
	for _, l := range levels {
		f := l.s.Family()
		if f == nil {
			continue // the zero Gauge or Count
		}
		if f.Label == "" {
			send(ch, f.Desc, f.Type, l.v)
		} else {
			send(ch, f.Desc, f.Type, l.v, l.s.Value())
		}
	}
}

// send sends one series. A label value that is not UTF-8 (which Prometheus
// refuses) has its bad bytes replaced, so the series is still served.
func send(ch chan<- prometheus.Metric, desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(desc, typ, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(desc, err)
	}
	ch <- m
}

// Counters serves what it keeps through client_golang.
var _ prometheus.Collector = (*Counters)(nil)

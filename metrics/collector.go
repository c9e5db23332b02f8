package metrics

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

var messagesTotal = prometheus.NewDesc("postroom_messages_total",
	"Messages per handler and outcome (event).", []string{"handler", "event"}, nil)

// Describe sends the description of every metric Counters serves, so a
// registry checks what Collect sends against it.
func (c *Counters) Describe(ch chan<- *prometheus.Desc) {
	ch <- messagesTotal
	for _, f := range families {
		ch <- f.desc
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
		s series
		v float64
	}
	var levels []level
	c.mu.Lock()
	for g, v := range c.gauges {
		levels = append(levels, level{g.s, v})
	}
	for n, v := range c.counts {
		levels = append(levels, level{n.s, v})
	}
	c.mu.Unlock()
	for _, l := range levels {
		if l.s.fam == nil {
			continue // the zero Gauge or Count
		}
		if l.s.fam.label == "" {
			send(ch, l.s.fam.desc, l.s.fam.typ, l.v)
		} else {
			send(ch, l.s.fam.desc, l.s.fam.typ, l.v, l.s.value)
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

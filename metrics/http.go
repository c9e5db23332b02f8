package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Handler serves c in the Prometheus text exposition format, as the counter
// postroom_messages_total{handler, event} and one line per gauge, so any
// Prometheus scrapes it without a client library in the process.
func Handler(c *Counters) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		var b strings.Builder
		b.WriteString("# HELP postroom_messages_total Messages per handler and outcome.\n")
		b.WriteString("# TYPE postroom_messages_total counter\n")
		counts := c.snapshot()
		handlers := make([]string, 0, len(counts))
		for h := range counts {
			handlers = append(handlers, h)
		}
		sort.Strings(handlers)
		for _, h := range handlers {
			events := make([]string, 0, len(counts[h]))
			for e := range counts[h] {
				events = append(events, string(e))
			}
			sort.Strings(events)
			for _, e := range events {
				fmt.Fprintf(&b, "postroom_messages_total{handler=%q,event=%q} %d\n", h, e, counts[h][Event(e)])
			}
		}
		c.mu.Lock()
		writeSeries(&b, "gauge", c.gauges)
		writeSeries(&b, "counter", c.counts)
		c.mu.Unlock()
		_, _ = w.Write([]byte(b.String()))
	})
}

// writeSeries writes one line per series, sorted, with one TYPE line per
// metric name (the series' name up to its labels).
func writeSeries[K ~string](b *strings.Builder, typ string, values map[K]float64) {
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, string(k))
	}
	sort.Strings(names)
	typed := ""
	for _, n := range names {
		if base, _, _ := strings.Cut(n, "{"); base != typed {
			fmt.Fprintf(b, "# TYPE %s %s\n", base, typ)
			typed = base
		}
		fmt.Fprintf(b, "%s %g\n", n, values[K(n)])
	}
}

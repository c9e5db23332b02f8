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
		c.mu.Lock()
		handlers := make([]string, 0, len(c.n))
		for h := range c.n {
			handlers = append(handlers, h)
		}
		sort.Strings(handlers)
		for _, h := range handlers {
			events := make([]string, 0, len(c.n[h]))
			for e := range c.n[h] {
				events = append(events, string(e))
			}
			sort.Strings(events)
			for _, e := range events {
				fmt.Fprintf(&b, "postroom_messages_total{handler=%q,event=%q} %d\n", h, e, c.n[h][Event(e)])
			}
		}
		gauges := make([]string, 0, len(c.gauges))
		for g := range c.gauges {
			gauges = append(gauges, string(g))
		}
		sort.Strings(gauges)
		for _, g := range gauges {
			fmt.Fprintf(&b, "# TYPE %s gauge\n%s %g\n", g, g, c.gauges[Gauge(g)])
		}
		c.mu.Unlock()
		_, _ = w.Write([]byte(b.String()))
	})
}

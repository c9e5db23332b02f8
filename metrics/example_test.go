package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/postroom/postroom/metrics"
)

// Counters is a Prometheus collector: register it on a registry and serve
// the registry with promhttp.
func ExampleCounters() {
	c := &metrics.Counters{}
	c.Record("billing.CreateInvoice", metrics.Handled)
	c.Record("billing.CreateInvoice", metrics.Duplicate)

	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "#") {
			fmt.Print(line)
		}
	}
	// Output:
	// postroom_messages_total{event="duplicate",handler="billing.CreateInvoice"} 1
	// postroom_messages_total{event="handled",handler="billing.CreateInvoice"} 1
}

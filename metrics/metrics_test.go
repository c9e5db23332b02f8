package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/metrics"
)

// serve registers c on a registry of its own and returns what promhttp
// serves for it in the text format, raw and parsed.
func serve(t *testing.T, c *metrics.Counters) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "%s", body)
	return string(body), families
}

// value returns the value of the series of name whose labels are exactly
// labels, and whether there is one.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf := families[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestServedCountsMatchRecordedAndLabelsAreEscaped records counts, levels
// and totals under names holding a quote, a backslash, a newline, a tab and
// a soft hyphen, and finds them served as Prometheus escapes them (only the
// first three; Go's %q would also write \t and \u00ad, which a Prometheus
// parser refuses), each with its value.
func TestServedCountsMatchRecordedAndLabelsAreEscaped(t *testing.T) {
	t.Parallel()
	const odd = "billing.\"Create\\Invoice\"\nv2\tx\u00ad"
	c := &metrics.Counters{}
	for range 3 {
		c.Record(odd, metrics.Handled)
	}
	c.Record(odd, metrics.Duplicate)
	c.Record("shipping.Ship", metrics.Unrouted)
	c.SetGauge(metrics.Gauge(metricseries.TableRows(odd)), 42)
	c.SetGauge(metrics.Gauge(metricseries.OutboxBacklog), 7)
	c.Add(metrics.Count(metricseries.ScheduleFires(odd)), 2)
	c.Add(metrics.Count(metricseries.ScheduleFires(odd)), 1)
	c.Add(metrics.Count(metricseries.CleanupDeleted("postroom_inbox")), 500)

	body, families := serve(t, c)
	require.Contains(t, body, "handler=\"billing.\\\"Create\\\\Invoice\\\"\\nv2\tx\u00ad\"",
		"Prometheus escapes \\ \" and newline in a label value, and nothing else")
	require.NotContains(t, body, "\nv2", "a raw newline would end the line")

	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"postroom_messages_total", map[string]string{"handler": odd, "event": "handled"}, 3},
		{"postroom_messages_total", map[string]string{"handler": odd, "event": "duplicate"}, 1},
		{"postroom_messages_total", map[string]string{"handler": "shipping.Ship", "event": "unrouted"}, 1},
		{"postroom_table_rows", map[string]string{"table": odd}, 42},
		{"postroom_outbox_backlog", nil, 7},
		{"postroom_schedule_fires_total", map[string]string{"schedule": odd}, 3},
		{"postroom_cleanup_deleted_rows_total", map[string]string{"table": "postroom_inbox"}, 500},
	} {
		got, ok := value(families, want.name, want.labels)
		require.True(t, ok, "%s%v is served", want.name, want.labels)
		require.Equal(t, want.value, got, "%s%v", want.name, want.labels)
	}
	require.Len(t, families["postroom_messages_total"].GetMetric(), 3, "only what was recorded")
	require.Equal(t, dto.MetricType_COUNTER, families["postroom_messages_total"].GetType())
	require.Equal(t, dto.MetricType_GAUGE, families["postroom_table_rows"].GetType())
	require.Equal(t, dto.MetricType_COUNTER, families["postroom_schedule_fires_total"].GetType())
	require.EqualValues(t, 3, c.Get(odd, metrics.Handled))
}

// TestNonUTF8LabelIsServed keeps a series whose label is not UTF-8
// (Prometheus refuses such a value) and the scrape as a whole.
func TestNonUTF8LabelIsServed(t *testing.T) {
	t.Parallel()
	c := &metrics.Counters{}
	c.Record("bad\xffname", metrics.Failed)
	c.Record("good", metrics.Handled)
	_, families := serve(t, c)
	got, ok := value(families, "postroom_messages_total", map[string]string{"handler": "bad\uFFFDname", "event": "failed"})
	require.True(t, ok)
	require.Equal(t, 1.0, got)
	got, ok = value(families, "postroom_messages_total", map[string]string{"handler": "good", "event": "handled"})
	require.True(t, ok)
	require.Equal(t, 1.0, got)
}

// TestGaugeAndCountNameTheirSeries gives an exporter of another metrics
// system each series' name and label without parsing.
func TestGaugeAndCountNameTheirSeries(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postroom_table_rows", metrics.Gauge(metricseries.TableRows("postroom_inbox")).Name())
	name, value := metrics.Gauge(metricseries.TableRows("postroom_inbox")).Label()
	require.Equal(t, []string{"table", "postroom_inbox"}, []string{name, value})
	name, value = metrics.Gauge(metricseries.OutboxLagSeconds).Label()
	require.Equal(t, []string{"", ""}, []string{name, value})
	require.Equal(t, "postroom_schedule_missed_slots_total", metrics.Count(metricseries.ScheduleMissed("s")).Name())
	name, value = metrics.Count(metricseries.ScheduleMissed("s")).Label()
	require.Equal(t, []string{"schedule", "s"}, []string{name, value})
	require.Empty(t, metrics.Gauge{}.Name(), "the zero Gauge names nothing")
}

// TestZeroGaugeIsNotServed sets the zero Gauge and still scrapes cleanly.
func TestZeroGaugeIsNotServed(t *testing.T) {
	t.Parallel()
	c := &metrics.Counters{}
	c.SetGauge(metrics.Gauge{}, 1)
	c.Add(metrics.Count{}, 1)
	c.SetGauge(metrics.Gauge(metricseries.CleanupLagSeconds), 0)
	_, families := serve(t, c)
	require.Len(t, families, 1)
	got, ok := value(families, "postroom_cleanup_lag_seconds", nil)
	require.True(t, ok)
	require.Zero(t, got)
}

// TestCountersServeAGauge: a gauge the bus sets is served beside the
// message counts, in Prometheus's text format.
func TestCountersServeAGauge(t *testing.T) {
	t.Parallel()
	c := &metrics.Counters{}
	c.Record("billing.CreateInvoice", metrics.Handled)
	c.SetGauge(metrics.Gauge(metricseries.TableRows("postroom_inbox")), 1)
	body, _ := serve(t, c)
	require.Contains(t, body, "\npostroom_messages_total{event=\"handled\",handler=\"billing.CreateInvoice\"} 1\n")
	require.Contains(t, body, "\npostroom_table_rows{table=\"postroom_inbox\"} 1\n")
}

package bus_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestMetricsEndpointMoves scrapes /metrics during a run and finds the
// counters moving, served in the text format a Prometheus parser reads.
func TestMetricsEndpointMoves(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t),
		Metrics: bus.Metrics{Addr: ":0"}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	handled := func() float64 {
		for _, m := range gather(t, b)["postroom_messages_total"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["handler"] == "billing.CreateInvoice" && labels["event"] == "handled" {
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	require.Zero(t, handled())
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, b.MetricsAddr(), "a bare port is served on loopback only")
	for range 3 {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o"}))
	}
	waitFor(t, "the counter to move", func() bool { return handled() == 3 })
}

// gather scrapes /metrics and parses it as Prometheus does.
func gather(t *testing.T, b *bus.Bus) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// scrape returns the value of the first series matching pattern (a regular
// expression of the series name and labels), or -1.
func scrape(t *testing.T, b *bus.Bus, pattern string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + pattern + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// TestMetricsEndpointShowsTablesCleanupSchedulesAndRouter scrapes the
// table gauges, the cleanup and scheduler totals and Watermill's router
// metrics while they move: three keys are handled, then the clock jumps
// eleven days, so the next cleanup slot (after missed ones) purges them.
func TestMetricsEndpointShowsTablesCleanupSchedulesAndRouter(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db, Now: now, Logger: testenv.Logger(t),
		Cleanup: bus.CleanupSchedule{Interval: time.Hour},
		Metrics: bus.Metrics{Addr: "127.0.0.1:0", TableGaugeInterval: 20 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	for range 3 {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o"}))
	}
	waitFor(t, "three inbox rows", func() bool { return scrape(t, b, `postroom_table_rows\{table="postroom_inbox"\}`) == 3 })
	require.GreaterOrEqual(t, scrape(t, b, `postroom_table_oldest_row_age_seconds\{table="postroom_inbox"\}`), 0.0)
	require.Equal(t, 0.0, scrape(t, b, `postroom_cleanup_lag_seconds`))
	require.Equal(t, 3.0, scrape(t, b, `handler_execution_time_seconds_count\{handler_name="billing.CreateInvoice@[^"]+",success="true"\}`),
		"Watermill's router metrics")

	offset.Store(int64(11 * 24 * time.Hour)) // the keys are past the ten-day retention; hourly slots were missed
	waitFor(t, "the lag to show", func() bool { return scrape(t, b, `postroom_cleanup_lag_seconds`) > 23*3600 })
	waitFor(t, "the purge", func() bool {
		return scrape(t, b, `postroom_cleanup_deleted_rows_total\{table="postroom_inbox"\}`) == 3
	})
	// The scheduler counts after its claim commits; the purge may finish first.
	waitFor(t, "the fire to be counted", func() bool {
		return scrape(t, b, `postroom_schedule_fires_total\{schedule="postroom.cleanup.billing"\}`) == 1
	})
	require.Equal(t, 11.0*24-1, scrape(t, b, `postroom_schedule_missed_slots_total\{schedule="postroom.cleanup.billing"\}`))
	waitFor(t, "the table to empty", func() bool { return scrape(t, b, `postroom_table_rows\{table="postroom_inbox"\}`) == 0 })
}

// TestCleanupLagCountsOnlyTheEndpointsOwnKeys: the database holds a key of
// another endpoint 8 days old and one of this endpoint 3 days old; with a
// retention of 2 days the lag is that of its own key, one day, not the
// other's six: this endpoint's cleanup purges only its own keys, and the
// other endpoint may keep its keys longer. A lag counting the table's
// oldest key would fire its alert for ever on the wrong service.
func TestCleanupLagCountsOnlyTheEndpointsOwnKeys(t *testing.T) {
	db := testenv.SQLite(t)
	endpoint := testenv.Name("ep")
	now := time.Now().UTC()
	for consumer, age := range map[string]time.Duration{"other/billing.CreateInvoice": 8 * 24 * time.Hour, endpoint + "/billing.CreateInvoice": 3 * 24 * time.Hour} {
		require.NoError(t, db.Exec("INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at) VALUES (?, '', 'k-1', 'x', ?)",
			consumer, now.Add(-age)).Error)
	}
	b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: gochannel.New(gochannel.Config{}), DB: db,
		InboxRetention: 2 * 24 * time.Hour, Logger: testenv.Logger(t),
		Cleanup: bus.CleanupSchedule{Disabled: true}, Metrics: bus.Metrics{TableGaugeInterval: 50 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	var lag float64
	waitFor(t, "the cleanup lag gauge", func() bool {
		var ok bool
		lag, ok = b.Counters().GetGauge(metrics.Gauge(metricseries.CleanupLagSeconds))
		return ok
	})
	require.InDelta(t, (24 * time.Hour).Seconds(), lag, 60, "the lag of this endpoint's own oldest key")
}

// TestAGaugeWhoseReadFailsIsLeftOut: the gauges read from the database
// (table rows and ages, cleanup lag, outbox backlog and lag, delayed
// messages) are left out of a scrape while their read fails, and come back
// with it. A gauge that keeps the last value read hides an outage: the
// outbox backlog stays at what it was, 0 on a quiet service, and no alert
// on it can fire. The tables are renamed away to make the reads fail, the
// database staying up.
func TestAGaugeWhoseReadFailsIsLeftOut(t *testing.T) {
	db := testenv.Postgres(t)
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: gochannel.New(gochannel.Config{}), DB: db, Outbox: true, DelayedPollInterval: 50 * time.Millisecond,
		Logger: slog.New(newRecordedLogs()), Cleanup: bus.CleanupSchedule{Disabled: true},
		Metrics: bus.Metrics{GaugeInterval: 50 * time.Millisecond, TableGaugeInterval: 50 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	gauges := []metrics.Gauge{metrics.Gauge(metricseries.TableRows("postroom_inbox")), metrics.Gauge(metricseries.TableOldestSeconds("postroom_inbox")),
		metrics.Gauge(metricseries.CleanupLagSeconds), metrics.Gauge(metricseries.OutboxBacklog), metrics.Gauge(metricseries.OutboxLagSeconds), metrics.Gauge(metricseries.DelayedMessages), metrics.Gauge(metricseries.DelayedOverdueSeconds)}
	served := func(want bool) func() bool {
		return func() bool {
			for _, g := range gauges {
				if _, ok := b.Counters().GetGauge(g); ok != want {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "every gauge read", served(true))
	renamed := []string{"postroom_inbox", "watermill_postroom_outbox", "postroom_delayed"}
	for _, table := range renamed {
		require.NoError(t, db.Exec("ALTER TABLE "+table+" RENAME TO away_"+table).Error)
	}
	waitFor(t, "every gauge whose read fails left out", served(false))
	for _, table := range renamed {
		require.NoError(t, db.Exec("ALTER TABLE away_"+table+" RENAME TO "+table).Error)
	}
	waitFor(t, "every gauge back once its read succeeds", served(true))
}

// TestRouterMetricsHaveOneSeriesPerHandlerAndTopic: Watermill labels its
// router metrics by router handler, and the bus has one per handler and
// topic ("<handler>@<topic>"), whatever the handler's concurrency: a
// handler with a concurrency of 4 serves one series of each metric.
func TestRouterMetricsHaveOneSeriesPerHandlerAndTopic(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}),
		Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}, Metrics: bus.Metrics{Addr: "127.0.0.1:0"}})
	require.NoError(t, err)
	release := make(chan struct{})
	var running atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error {
		running.Add(1)
		<-release
		return nil
	}, bus.WithConcurrency(4)))
	start(t, b, "error")
	for range 8 {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o"}))
	}
	waitFor(t, "four at once: each subscription handles one", func() bool { return running.Load() == 4 })
	close(release)
	pattern := `handler_execution_time_seconds_count\{handler_name="billing.CreateInvoice@[^"#]+",success="true"\}`
	waitFor(t, "eight handled, in one series", func() bool { return scrape(t, b, pattern) == 8 })
	resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotRegexp(t, `handler_name="[^"]*#\d+"`, string(body), "a series per subscription")
}

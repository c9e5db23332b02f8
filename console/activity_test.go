package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
)

// cell returns the chart cell of event in the row of name on an overview
// page, or "" if there is none.
func cell(body, name, event string) string {
	row := regexp.MustCompile(`(?s)<tr data-row="` + regexp.QuoteMeta(name) + `">.*?</tr>`).FindString(body)
	return regexp.MustCompile(`(?s)<td class="chart ` + event + `"[^>]*>.*?</td>`).FindString(row)
}

func total(t *testing.T, body, name, event string) string {
	t.Helper()
	m := regexp.MustCompile(`data-total="(\d+)"`).FindStringSubmatch(cell(body, name, event))
	if m == nil {
		return ""
	}
	return m[1]
}

// TestChartsFromTheDatabase: without metrics endpoints, the overview
// charts the inbox keys done per consumer and minute, over the last hour,
// on every store; claims and older keys are not counted, and duplicates
// and stale say they need the metrics.
func TestChartsFromTheDatabase(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			d, err := dialects.Of(db)
			require.NoError(t, err)
			now := time.Date(2026, 3, 1, 12, 30, 20, 0, time.UTC)
			insert := func(consumer, id string, at time.Time) {
				require.NoError(t, db.Exec(d.InboxInsert(inbox.TableDefault), consumer, "", id, "test.Charge", d.Time(at)).Error)
			}
			for i := range 3 {
				insert("billing/test.Charge", fmt.Sprint("a", i), now.Add(-5*time.Minute))
			}
			insert("billing/test.Charge", "b1", now.Add(-30*time.Minute))
			insert("billing/test.Charge", "b2", now.Add(-30*time.Minute-10*time.Second))
			insert("billing/test.Charge", "old", now.Add(-2*time.Hour))
			insert("shipping/test.Ship", "s1", now)
			require.NoError(t, db.Exec(d.ClaimInsert(inbox.TableDefault), "billing/test.Charge", "", "claim", "test.Charge",
				d.Time(now.Add(-time.Minute)), d.Time(now.Add(time.Minute)), "sum", []byte("{}")).Error)

			c, err := console.New(console.Config{DB: db, Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)
			res, err := http.Get(srv.URL + "/")
			require.NoError(t, err)
			body := readAll(t, res)
			require.NotContains(t, body, `class="error"`)

			require.Equal(t, "5", total(t, body, "billing/test.Charge", "handled"), "the keys done in the last hour")
			require.Equal(t, "1", total(t, body, "shipping/test.Ship", "handled"))
			handled := cell(body, "billing/test.Charge", "handled")
			// Bars are minutes: 12:25 is bar 54 (x 108), three keys, the
			// peak; 12:00 is bar 29 (x 58), two keys.
			require.Contains(t, handled, `<rect x="108" y="1.0" width="1.5" height="22.0"/>`)
			require.Contains(t, handled, `<rect x="58" y="8.3" width="1.5" height="14.7"/>`)
			require.Len(t, regexp.MustCompile(`<rect `).FindAllString(handled, -1), 2, "a bar for each minute with keys")
			for _, event := range []string{"duplicate", "stale", "failed"} {
				require.Contains(t, cell(body, "billing/test.Charge", event), "n/a", event)
			}
			require.Contains(t, body, "start the console with <code>--metrics</code>")
		})
	}
}

// TestChartsFromMetrics: with metrics endpoints, Run samples them and the
// overview charts each handler's handled, duplicates, stale and failed
// since the console started (what the bus counted before is the
// baseline); several buses add up; an endpoint that cannot be read is
// said, the others are still charted.
func TestChartsFromMetrics(t *testing.T) {
	serve := func(c *metrics.Counters) string {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	var one, two metrics.Counters
	for range 100 {
		one.Record("test.Charge", metrics.Handled) // before the console: not charted
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	c, err := console.New(console.Config{DB: testenv.SQLite(t), Metrics: []string{serve(&one), serve(&two), down.URL + "/metrics"},
		SampleInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	overview := func() string {
		res, err := http.Get(srv.URL + "/")
		require.NoError(t, err)
		return readAll(t, res)
	}
	body := overview()
	require.Contains(t, body, `data-sampled=""`, "nothing sampled before Run")

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-ran) })
	require.Eventually(t, func() bool { return !regexp.MustCompile(`data-sampled=""`).MatchString(overview()) }, 10*time.Second, 10*time.Millisecond)

	for range 3 {
		one.Record("test.Charge", metrics.Handled)
	}
	two.Record("test.Charge", metrics.Handled)
	one.Record("test.Charge", metrics.Duplicate)
	two.Record("test.Charge", metrics.Stale)
	two.Record("test.Charge", metrics.Stale)
	one.Record("test.Ship", metrics.Failed)
	one.Record("test.Ship", metrics.Retried) // not charted
	require.Eventually(t, func() bool {
		body = overview()
		return total(t, body, "test.Charge", "handled") == "4" && total(t, body, "test.Ship", "failed") == "1"
	}, 10*time.Second, 10*time.Millisecond, "the counts since the console started, of both buses")
	require.Equal(t, "1", total(t, body, "test.Charge", "duplicate"))
	require.Equal(t, "2", total(t, body, "test.Charge", "stale"))
	require.Equal(t, "0", total(t, body, "test.Charge", "failed"))
	require.Equal(t, "0", total(t, body, "test.Ship", "handled"))
	require.Contains(t, cell(body, "test.Charge", "handled"), "<rect ", "a bar")
	require.NotContains(t, cell(body, "test.Charge", "failed"), "<rect ", "no bar without a count")
	require.Contains(t, body, "metrics "+down.URL+"/metrics", "the endpoint that cannot be read is named")
}

func TestChartConfigValidate(t *testing.T) {
	_, err := console.New(console.Config{DB: testenv.SQLite(t), Metrics: []string{"127.0.0.1:9464", "ftp://u:s3cret@h/metrics"},
		SampleInterval: -1, ChartWindow: time.Second})
	require.ErrorContains(t, err, `metrics endpoint "127.0.0.1:9464" is not an http(s) URL`)
	require.ErrorContains(t, err, `metrics endpoint "ftp://u:xxxxx@h/metrics"`, "its password redacted")
	require.NotContains(t, err.Error(), "s3cret")
	require.ErrorContains(t, err, "SampleInterval -1ns is negative")
	require.ErrorContains(t, err, "ChartWindow 1s is shorter than a minute")
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

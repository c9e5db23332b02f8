package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/metrics"
)

// SampleIntervalDefault is the default Config.SampleInterval.
const SampleIntervalDefault = 10 * time.Second

// ChartWindowDefault is the time the overview's charts cover.
const ChartWindowDefault = time.Hour

// chartBars is how many bars a chart has: one a minute by default.
const chartBars = 60

// chartEvents are the events the overview charts, in their columns' order.
var chartEvents = []metrics.Event{metrics.Handled, metrics.Duplicate, metrics.Stale, metrics.Failed}

// metricsFamily is the counter the bus serves per handler and event.
const metricsFamily = "postroom_messages_total"

// activity is the overview's charts: per row and event, a count per bar.
type activity struct {
	start time.Time     // the first bar's start
	width time.Duration // a bar's width
	rows  map[string]map[metrics.Event]*[chartBars]int64
}

// newActivity returns an empty activity for the window ending with now's
// bar; bars start at multiples of their width, so the database can count them.
func newActivity(now time.Time, window time.Duration) *activity {
	width := max(window/chartBars, time.Second).Truncate(time.Second)
	end := now.Truncate(width).Add(width)
	return &activity{start: end.Add(-chartBars * width), width: width, rows: map[string]map[metrics.Event]*[chartBars]int64{}}
}

// row makes sure name has a row, with no count yet.
func (a *activity) row(name string) map[metrics.Event]*[chartBars]int64 {
	r := a.rows[name]
	if r == nil {
		r = map[metrics.Event]*[chartBars]int64{}
		for _, e := range chartEvents {
			r[e] = &[chartBars]int64{}
		}
		a.rows[name] = r
	}
	return r
}

// add counts n events e of name at t; a time outside the window is left out.
func (a *activity) add(name string, e metrics.Event, t time.Time, n int64) {
	if t.Before(a.start) {
		return
	}
	if i := int(t.Sub(a.start) / a.width); i < chartBars {
		a.row(name)[e][i] += n
	}
}

// inboxActivity counts the inbox keys done per consumer and bar.
func (c *Console) inboxActivity(ctx context.Context, a *activity) error {
	d, err := dialects.Of(c.cfg.DB)
	if err != nil {
		return err
	}
	query, err := d.InboxActivity(c.tables.Inbox)
	if err != nil {
		return err
	}
	seconds := int64(a.width / time.Second)
	rows, err := c.cfg.DB.WithContext(ctx).Raw(query, seconds, d.Time(a.start)).Rows()
	if err != nil {
		return fmt.Errorf("console: handled messages per minute: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var consumer string
		var bucket, n int64
		if err := rows.Scan(&consumer, &bucket, &n); err != nil {
			return fmt.Errorf("console: handled messages per minute: %w", err)
		}
		a.add(consumer, metrics.Handled, time.Unix(bucket*seconds, 0), n)
	}
	return rows.Err()
}

// failedActivity counts the error topic's messages per bar, by when they
// were moved there, on their consumer's row (else the handler's).
func failedActivity(a *activity, list []failedMessage, consumers []string) {
	byGroup := map[string]string{}
	for _, consumer := range consumers {
		if endpoint, handler, ok := strings.Cut(consumer, "/"); ok {
			byGroup[bus.GroupOf(endpoint, handler)] = consumer
		}
	}
	for _, f := range list {
		name, ok := byGroup[f.Group]
		if !ok {
			name = f.Handler
		}
		if !f.FailedAt.IsZero() {
			a.add(name, metrics.Failed, f.FailedAt, 1)
		}
	}
}

// seriesKey is one counter of a bus: a handler's count of an event.
type seriesKey struct {
	handler string
	event   metrics.Event
}

// point is how much a counter grew between two samples, and when.
type point struct {
	at time.Time
	n  int64
}

// sampler keeps each counter's growth per sample of the buses' endpoints
// for one window; an endpoint's first sample is its baseline.
type sampler struct {
	urls   []string
	window time.Duration
	client *http.Client

	mu       sync.Mutex
	last     map[string]map[seriesKey]float64 // per URL, the counters of its last sample
	points   map[seriesKey][]point            // oldest first, within the window
	handlers map[string]bool                  // every handler seen
	errs     map[string]error                 // per URL, its last sample's error
	sampled  time.Time                        // the last sample
}

// sampleTimeout is how long reading one endpoint may take.
const sampleTimeout = 5 * time.Second

func newSampler(urls []string, window time.Duration) *sampler {
	return &sampler{urls: urls, window: window, client: &http.Client{Timeout: sampleTimeout},
		last: map[string]map[seriesKey]float64{}, points: map[seriesKey][]point{}, handlers: map[string]bool{}, errs: map[string]error{}}
}

// sample reads every endpoint once, at now.
func (s *sampler) sample(ctx context.Context, now time.Time) {
	for _, url := range s.urls {
		counters, err := s.read(ctx, url)
		s.mu.Lock()
		s.errs[url] = err
		if err == nil {
			s.record(url, counters, now)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.sampled = now
	for k, list := range s.points {
		i := 0
		for i < len(list) && now.Sub(list[i].at) >= s.window {
			i++
		}
		if i == len(list) {
			delete(s.points, k)
		} else {
			s.points[k] = list[i:]
		}
	}
	s.mu.Unlock()
}

// record keeps url's counters' growth since its last sample (one that went
// down was reset: it grew by its value). Callers hold s.mu.
func (s *sampler) record(url string, counters map[seriesKey]float64, now time.Time) {
	last, seen := s.last[url]
	for k, v := range counters {
		s.handlers[k.handler] = true
		if !seen {
			continue // the baseline
		}
		grew := v - last[k]
		if v < last[k] {
			grew = v
		}
		if n := int64(grew); n > 0 {
			s.points[k] = append(s.points[k], point{now, n})
		}
	}
	s.last[url] = counters
}

// read returns url's postroom_messages_total counters of charted events.
func (s *sampler) read(ctx context.Context, url string) (map[seriesKey]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	counters := map[seriesKey]float64{}
	family, ok := families[metricsFamily]
	if !ok {
		return counters, nil // a bus that has recorded nothing yet
	}
	for _, m := range family.GetMetric() {
		var k seriesKey
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "handler":
				k.handler = l.GetValue()
			case "event":
				k.event = metrics.Event(l.GetValue())
			}
		}
		if slices.Contains(chartEvents, k.event) {
			counters[k] = m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return counters, nil
}

// fill puts the samples within a's window into a and returns when the last
// was taken and the endpoints' errors.
func (s *sampler) fill(a *activity) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range s.handlers {
		a.row(h)
	}
	for k, list := range s.points {
		for _, p := range list {
			a.add(k.handler, k.event, p.at, p.n)
		}
	}
	var errs []error
	for _, url := range s.urls {
		if err := s.errs[url]; err != nil {
			errs = append(errs, fmt.Errorf("metrics %s: %w", url, err))
		}
	}
	return s.sampled, errors.Join(errs...)
}

// Run samples Config.Metrics every Config.SampleInterval until ctx ends,
// for the overview's charts; without Metrics it returns at once.
func (c *Console) Run(ctx context.Context) error {
	if c.sampler == nil {
		return nil
	}
	ticker := time.NewTicker(c.cfg.SampleInterval)
	defer ticker.Stop()
	for {
		c.sampler.sample(ctx, c.now())
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// chart is one event's chart of one row, as a page draws it.
type chart struct {
	Event   string
	Total   int64
	Peak    int64
	Bars    []chartBar
	Title   string
	Unknown bool // the source cannot count this event
}

// chartBar is one bar of an SVG chart 120 wide and 24 high.
type chartBar struct{ X, Y, H string }

// chartRow is one row of the overview's charts.
type chartRow struct {
	Name   string
	Charts []chart
}

// charts turns a into rows, by name; known: the events the source counts.
func (a *activity) charts(known map[metrics.Event]bool) []chartRow {
	names := make([]string, 0, len(a.rows))
	for name := range a.rows {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]chartRow, 0, len(names))
	per := a.width.String()
	for _, name := range names {
		row := chartRow{Name: name}
		for _, e := range chartEvents {
			ch := chart{Event: string(e), Unknown: !known[e]}
			bars := a.rows[name][e]
			for _, n := range bars {
				ch.Total += n
				ch.Peak = max(ch.Peak, n)
			}
			for i, n := range bars {
				if n == 0 {
					continue
				}
				h := max(1, 22*float64(n)/float64(ch.Peak))
				ch.Bars = append(ch.Bars, chartBar{X: fmt.Sprintf("%d", i*2), Y: fmt.Sprintf("%.1f", 23-h), H: fmt.Sprintf("%.1f", h)})
			}
			ch.Title = fmt.Sprintf("%s: %d, at most %d in %s", e, ch.Total, ch.Peak, per)
			row.Charts = append(row.Charts, ch)
		}
		out = append(out, row)
	}
	return out
}

// chartsView is the overview's charts section.
type chartsView struct {
	Rows     []chartRow
	Metrics  bool      // from the buses' Prometheus endpoints, else the database
	Buses    int       // how many endpoints are sampled
	Sampled  time.Time // the last sample
	Failed   bool      // from the database: the error topic was read
	Window   string
	Width    string
	Interval string
}

// charts returns the overview's charts, from the samples of Config.Metrics
// or else the database and the failed messages read (when failedRead).
func (c *Console) charts(ctx context.Context, now time.Time, failed []failedMessage, failedRead bool, consumers []storeinfo.ConsumerSummary) (chartsView, error) {
	a := newActivity(now, c.cfg.ChartWindow)
	v := chartsView{Window: span(c.cfg.ChartWindow), Width: span(a.width), Interval: span(c.cfg.SampleInterval)}
	if c.sampler != nil {
		sampled, err := c.sampler.fill(a)
		v.Metrics, v.Buses, v.Sampled = true, len(c.cfg.Metrics), sampled
		v.Rows = a.charts(map[metrics.Event]bool{metrics.Handled: true, metrics.Duplicate: true, metrics.Stale: true, metrics.Failed: true})
		return v, err
	}
	err := c.inboxActivity(ctx, a)
	known := map[metrics.Event]bool{metrics.Handled: true}
	if failedRead {
		names := make([]string, len(consumers))
		for i, s := range consumers {
			names[i] = s.Consumer
		}
		failedActivity(a, failed, names)
		known[metrics.Failed] = true
	}
	v.Rows = a.charts(known)
	v.Failed = failedRead
	return v, err
}

// span writes d as people read it: "1 h", "90 min", "10 s".
func span(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

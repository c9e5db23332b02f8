package bus

import (
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// routerMetrics serves Watermill's router metrics with one series per
// handler and topic, not per subscription: the bus names each of a
// handler's subscriptions "<handler>@<topic>#<i>" (Watermill's router
// wants a name each), and Watermill labels its series by that name, so a
// HandleBatch handler on RabbitMQ (its concurrency times its batch size
// subscriptions: 1,600 at WithBatch(100) and Concurrency 16) served as
// many series per metric, histograms included (found by a review). It
// gathers the registry Watermill registers on and adds up the series
// whose handler_name differs only in "#<i>".
type routerMetrics struct{ inner *prometheus.Registry }

// subscriptionSuffix is what sets a handler's subscriptions apart.
var subscriptionSuffix = regexp.MustCompile(`#\d+$`)

// Describe describes nothing: the collector is unchecked (its series
// appear as Watermill records them).
func (routerMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends Watermill's series, those of one handler and topic added up.
func (r routerMetrics) Collect(ch chan<- prometheus.Metric) {
	families, err := r.inner.Gather()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("watermill_router_metrics", "Watermill's router metrics.", nil, nil), err)
		return
	}
	for _, f := range families {
		merged := map[string]*mergedSeries{}
		var order []string
		for _, m := range f.GetMetric() {
			var names, values []string
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if l.GetName() == "handler_name" {
					v = subscriptionSuffix.ReplaceAllString(v, "")
				}
				names, values = append(names, l.GetName()), append(values, v)
			}
			key := strings.Join(values, "\x00")
			s, ok := merged[key]
			if !ok {
				s = &mergedSeries{names: names, values: values, buckets: map[float64]uint64{}}
				merged[key] = s
				order = append(order, key)
			}
			s.add(m)
		}
		for _, key := range order {
			if metric, err := merged[key].metric(f); err == nil {
				ch <- metric
			} else {
				ch <- prometheus.NewInvalidMetric(prometheus.NewDesc(f.GetName(), f.GetHelp(), nil, nil), err)
			}
		}
	}
}

// mergedSeries is the sum of the series of one label set.
type mergedSeries struct {
	names, values []string
	value         float64            // a counter's or a gauge's
	count         uint64             // a histogram's
	sum           float64            // a histogram's
	buckets       map[float64]uint64 // a histogram's, cumulative
}

func (s *mergedSeries) add(m *dto.Metric) {
	switch {
	case m.Counter != nil:
		s.value += m.GetCounter().GetValue()
	case m.Gauge != nil:
		s.value += m.GetGauge().GetValue()
	case m.Untyped != nil:
		s.value += m.GetUntyped().GetValue()
	case m.Histogram != nil:
		h := m.GetHistogram()
		s.count += h.GetSampleCount()
		s.sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			s.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
}

func (s *mergedSeries) metric(f *dto.MetricFamily) (prometheus.Metric, error) {
	desc := prometheus.NewDesc(f.GetName(), f.GetHelp(), s.names, nil)
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		return prometheus.NewConstMetric(desc, prometheus.CounterValue, s.value, s.values...)
	case dto.MetricType_GAUGE:
		return prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, s.values...)
	case dto.MetricType_HISTOGRAM:
		buckets := map[float64]uint64{}
		bounds := make([]float64, 0, len(s.buckets))
		for b := range s.buckets {
			bounds = append(bounds, b)
		}
		slices.Sort(bounds)
		for _, b := range bounds {
			buckets[b] = s.buckets[b]
		}
		return prometheus.NewConstHistogram(desc, s.count, s.sum, buckets, s.values...)
	default:
		return prometheus.NewConstMetric(desc, prometheus.UntypedValue, s.value, s.values...)
	}
}

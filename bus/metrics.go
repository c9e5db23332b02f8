package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	wmetrics "github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/store"
)

// addRouterMetrics registers Watermill's router metrics on the bus's
// registry. Their handler_name is "<handler>@<topic>".
func (b *Bus) addRouterMetrics() {
	b.registry = prometheus.NewRegistry()
	wmetrics.NewPrometheusMetricsBuilder(b.registry, "", "").AddPrometheusRouterMetrics(b.router)
}

// metricsHandler serves postroom's metrics beside Watermill's; a series
// that cannot be gathered is logged and left out.
func (b *Bus) metricsHandler(counters *metrics.Counters) http.Handler {
	if err := b.registry.Register(counters); err != nil {
		var again prometheus.AlreadyRegisteredError
		if !errors.As(err, &again) {
			b.cfg.Logger.Warn("bus: register postroom's metrics", "error", err)
		}
	}
	return promhttp.HandlerFor(b.registry, promhttp.HandlerOpts{
		ErrorLog:      promLog{b.cfg.Logger},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// promLog logs promhttp's errors as warnings.
type promLog struct{ l *slog.Logger }

func (p promLog) Println(v ...any) { p.l.Warn("bus: metrics", "error", fmt.Sprint(v...)) }

// needsTables reports whether a handler uses the inbox or the stale check.
func (b *Bus) needsTables() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.needsCleanup
}

// reportTables sets the table gauges and the cleanup lag until ctx is done.
func (b *Bus) reportTables(ctx context.Context, gauges metrics.GaugeSetter) {
	var tables []string // those set: unknown when a read fails
	unknown := func() {
		for _, table := range tables {
			gauges.SetGauge(metrics.Gauge(metricseries.TableRows(table)), metrics.Unknown)
			gauges.SetGauge(metrics.Gauge(metricseries.TableOldestSeconds(table)), metrics.Unknown)
		}
		gauges.SetGauge(metrics.Gauge(metricseries.CleanupLagSeconds), metrics.Unknown)
	}
	every(ctx, b.cfg.Metrics.TableGaugeInterval, func() {
		stats, err := storeinfo.Stats(ctx, b.cfg.DB, store.Tables{})
		if err != nil {
			if ctx.Err() == nil {
				b.cfg.Logger.Warn("bus: table gauges", "error", err)
				unknown()
			}
			return
		}
		now := b.cfg.Now()
		tables = tables[:0]
		for _, s := range stats {
			tables = append(tables, s.Table)
			gauges.SetGauge(metrics.Gauge(metricseries.TableRows(s.Table)), float64(s.Rows))
			age := 0.0
			if !s.Oldest.IsZero() {
				age = now.Sub(s.Oldest).Seconds()
			}
			gauges.SetGauge(metrics.Gauge(metricseries.TableOldestSeconds(s.Table)), age)
		}
		oldest, err := b.oldestOwnKey(ctx)
		if err != nil {
			if ctx.Err() == nil {
				b.cfg.Logger.Warn("bus: cleanup lag gauge", "error", err)
				gauges.SetGauge(metrics.Gauge(metricseries.CleanupLagSeconds), metrics.Unknown)
			}
			return
		}
		lag := 0.0
		if !oldest.IsZero() {
			lag = max(0, now.Sub(oldest).Seconds()-b.cfg.InboxRetention.Seconds())
		}
		gauges.SetGauge(metrics.Gauge(metricseries.CleanupLagSeconds), lag)
	})
}

// oldestOwnKey returns when the oldest inbox key of this endpoint's
// consumers was received (zero: none), for the cleanup lag: another
// endpoint on the database may keep its keys longer. "<endpoint>/…" is the
// key range from "<endpoint>/" to "<endpoint>0" ('0' follows '/').
func (b *Bus) oldestOwnKey(ctx context.Context) (time.Time, error) {
	d, err := dialects.Of(b.cfg.DB)
	if err != nil {
		return time.Time{}, err
	}
	prefix := b.consumer("")
	var v any
	err = b.cfg.DB.WithContext(ctx).Raw("SELECT MIN(received_at) FROM "+store.Tables{}.WithDefaults().Inbox+" WHERE consumer >= ? AND consumer < ?",
		prefix, prefix[:len(prefix)-1]+"0").Row().Scan(&v)
	if err != nil || v == nil {
		return time.Time{}, err
	}
	return d.ParseTime(v)
}

// add adds to a running total when the Recorder keeps them.
func (b *Bus) add(c metrics.Count, delta float64) {
	if a, ok := b.cfg.Metrics.Recorder.(metrics.Adder); ok {
		a.Add(c, delta)
	}
}

// every runs f now and then every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loopbackByDefault puts an address without a host (":9464") on loopback.
func loopbackByDefault(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

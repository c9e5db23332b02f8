package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport/amqp"
)

// outageBus runs a bus on RabbitMQ through a proxy and returns them once
// a command went through; the test then cuts the broker off.
func outageBus(t *testing.T, mod func(*bus.Config)) (*bus.Bus, *amqptest.Proxy, func() error) {
	t.Helper()
	proxy, url := amqptest.NewProxy(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	cfg := bus.Config{Endpoint: testenv.Name("outage"), ErrorTopic: testenv.Name("error_"), Transport: tr,
		DB: testenv.Postgres(t), Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}}
	if mod != nil {
		mod(&cfg)
	}
	b, err := bus.New(cfg)
	require.NoError(t, err)
	handled := make(chan struct{}, 100)
	require.NoError(t, bus.Handle(b, func(context.Context, *ConfCmd) error { handled <- struct{}{}; return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: 1}))
	<-handled
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() })
	return b, proxy, stop
}

// TestSendDuringABrokerOutageEndsWithItsContext: the broker takes
// connections and never answers (a blackhole); Sends with a 1 s deadline,
// five at once, each return an error by their deadline. A dial that
// ignores the context, one publish at a time, dials for up to 30 s, so the
// callers queue behind each other and a Send with a 10 s deadline returns
// minutes later.
func TestSendDuringABrokerOutageEndsWithItsContext(t *testing.T) {
	b, proxy, _ := outageBus(t, nil)
	proxy.Blackhole(true)
	proxy.Drop()
	var wg sync.WaitGroup
	took := make([]time.Duration, 5)
	errs := make([]error, 5)
	for i := range took {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			errs[i] = bus.Send(ctx, b, &ConfCmd{N: 2})
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range took {
		require.Error(t, errs[i], "a Send the broker never answered")
		require.Less(t, took[i], 10*time.Second, "Send %d took %s with a 1 s deadline (all: %v)", i, took[i], took)
	}
}

// TestAStopDuringABrokerBlackholeEndsInTime: a delayed message falls due
// while the broker takes connections and never answers; the bus's stop
// does not wait for the delayed relay's publish. A dial of up to 30 s that
// ignores the stop, inside the transaction that locks the due rows, holds
// the stop for 45 s.
func TestAStopDuringABrokerBlackholeEndsInTime(t *testing.T) {
	b, proxy, stop := outageBus(t, func(cfg *bus.Config) {
		cfg.StopTimeout = time.Second
		cfg.DelayedPollInterval = 100 * time.Millisecond
	})
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: 3}, bus.DeliverAfter(time.Second)))
	proxy.Blackhole(true)
	proxy.Drop()
	time.Sleep(2 * time.Second) // due, and the relay dialling
	start := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(start), 12*time.Second, "the stop waited for a publish to a broker that never answers")
}

// TestTheTransportConnectedGaugeFollowsTheBroker: postroom_transport_connected
// is 1 while the bus's connections to RabbitMQ are up, 0 while the broker
// is out of reach (it takes connections and never answers), and 1 again
// once it is back. Without it, nothing but the logs tells an operator that
// the broker is out of reach.
func TestTheTransportConnectedGaugeFollowsTheBroker(t *testing.T) {
	b, proxy, _ := outageBus(t, func(cfg *bus.Config) { cfg.Metrics.GaugeInterval = 50 * time.Millisecond })
	gauge := func(want float64) func() bool {
		return func() bool {
			v, ok := b.Counters().GetGauge(metrics.Gauge(metricseries.TransportConnected))
			return ok && v == want
		}
	}
	waitFor(t, "the connected gauge at 1", gauge(1))
	proxy.Blackhole(true)
	proxy.Drop()
	waitFor(t, "the connected gauge at 0 while the broker is out of reach", gauge(0))
	proxy.Blackhole(false)
	waitFor(t, "the connected gauge back at 1", gauge(1))
}

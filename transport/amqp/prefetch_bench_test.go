package amqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport/amqp"
)

type BenchWork struct{ I int }

func (BenchWork) MessageName() string { return "bench.Work" }

// BenchmarkPrefetch measures how fast a bus handler with nothing to do
// drains a RabbitMQ queue, for prefetch counts and handler concurrencies
// side by side (docs/transports-amqp-notes.md has the figures):
//
//	go test -run '^$' -bench Prefetch -benchtime 3000x ./transport/amqp/
func BenchmarkPrefetch(b *testing.B) {
	for _, concurrency := range []int{1, 4} {
		for _, prefetch := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("concurrency=%d/prefetch=%d", concurrency, prefetch), func(b *testing.B) {
				tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(b), Prefetch: prefetch})
				if err != nil {
					b.Fatal(err)
				}
				amqptest.Cleanup(b, tr)
				bb, err := bus.New(bus.Config{Endpoint: testenv.Name("bench"), Transport: tr, Concurrency: concurrency,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer bb.Close()
				if err := bus.Handle(bb, func(context.Context, *BenchWork) error { return nil }); err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				for i := range b.N { // queued before the handler runs
					if err := bus.Send(ctx, bb, &BenchWork{I: i}); err != nil {
						b.Fatal(err)
					}
				}
				runCtx, stop := context.WithCancel(ctx)
				defer stop()
				b.ResetTimer()
				start := time.Now()
				go func() { _ = bb.Run(runCtx) }()
				c := bb.Counters()
				for c.Total(metrics.Handled) < uint64(b.N) {
					time.Sleep(time.Millisecond)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
			})
		}
	}
}

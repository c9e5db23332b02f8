package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/transport/amqp"
)

// Shipped is the event the outbox runs send.
type Shipped struct{ I int64 }

// MessageName is the stable name of Shipped.
func (Shipped) MessageName() string { return "bench.Shipped" }

// RelayResult is the outbox measurement.
type RelayResult struct {
	RelayPerSecond            float64 // outbox -> RabbitMQ
	WithoutSends, WithOneSend float64 // inbox handler throughput at concurrency 8
}

// runRelay measures the relay's throughput from PostgreSQL to RabbitMQ, and
// an inbox handler with and without one message sent through the outbox.
func runRelay(ctx context.Context, db *gorm.DB, amqpURL string, n int64, out io.Writer) (RelayResult, error) {
	var r RelayResult
	tr, err := amqp.New(amqp.Config{URL: amqpURL})
	if err != nil {
		return r, err
	}
	defer tr.Close()
	o, err := outbox.New(outbox.Config{DB: db, Destination: tr.Publisher(), PollInterval: 10 * time.Millisecond})
	if err != nil {
		return r, err
	}
	uow, err := unitofwork.New(unitofwork.Config{DB: db})
	if err != nil {
		return r, err
	}
	queue := uow(outbox.Returned(o, fmt.Sprintf("bench-relay-%d", time.Now().UnixNano()))(func(msg *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage(msg.UUID, []byte(`{}`))}, nil
	}))
	for i := range n {
		if _, err := queue(message.NewMessage(fmt.Sprint(i), nil)); err != nil {
			return r, err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- o.Run(runCtx) }()
	for {
		b, err := o.Backlog(ctx)
		if err != nil {
			stop()
			return r, err
		}
		if b.Messages == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.RelayPerSecond = float64(n) / time.Since(start).Seconds()
	stop()
	if err := <-done; err != nil {
		return r, err
	}
	_ = o.Close()

	for _, send := range []bool{false, true} {
		if err := db.Exec(truncateAll).Error; err != nil {
			return r, err
		}
		perSecond, err := handleWithSends(ctx, db, send, n)
		if err != nil {
			return r, err
		}
		if send {
			r.WithOneSend = perSecond
		} else {
			r.WithoutSends = perSecond
		}
	}
	fmt.Fprintf(out, "outbox: relay PostgreSQL -> RabbitMQ %.0f msg/s; inbox handler at concurrency 8: %.0f msg/s without sends, %.0f msg/s sending one event through the outbox (ratio %.2f)\n",
		r.RelayPerSecond, r.WithoutSends, r.WithOneSend, r.WithOneSend/r.WithoutSends)
	return r, nil
}

// handleWithSends times n messages through an inbox handler with the outbox
// on, which sends one event each when send is true.
func handleWithSends(ctx context.Context, db *gorm.DB, send bool, n int64) (float64, error) {
	gate := make(chan struct{})
	b, err := bus.New(bus.Config{
		Endpoint: "bench", DB: db, Outbox: true,
		Concurrency: 8, Logger: slog.New(slog.DiscardHandler), Cleanup: bus.CleanupSchedule{Disabled: true},
		Middleware: []message.HandlerMiddleware{func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) { <-gate; return h(msg) }
		}},
	})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	err = bus.Handle(b, func(ctx context.Context, w *Work) error {
		if err := unitofwork.Tx(ctx).Exec(insertBusinessGorm, bus.MessageID(ctx), w.I).Error; err != nil {
			return err
		}
		if send {
			return bus.Publish(ctx, b, &Shipped{I: w.I})
		}
		return nil
	}, bus.WithInbox())
	if err != nil {
		return 0, err
	}
	stop, err := runAndSend(ctx, b, n)
	defer stop()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	close(gate)
	for b.Counters().Total(metrics.Handled) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/transport/amqp"
)

// rawAMQPQueue is the queue and fanout exchange of the hand-rolled consumer.
const rawAMQPQueue = "postroom-bench-raw-amqp"

// runRawAMQP is what a team would write instead of the bus: a RabbitMQ
// consumer on amqp091 and pgx alone, no postroom, no Watermill, doing the
// raw inbox's SQL (inbox key INSERT … ON CONFLICT DO NOTHING, business
// INSERT) in one transaction per message and acking after the COMMIT.
//
// It is shaped as the bus's RabbitMQ run (runRabbitMQ): a durable classic
// queue behind a durable fanout exchange, persistent messages with a
// UUIDv7 message_id and a JSON body, one connection with concurrency
// channels consuming the queue at prefetch (the transport's
// amqp.PrefetchDefault for the bus's figure). The n messages are published
// first, with the consumers already attached and holding their first
// deliveries behind a gate; the clock runs from opening the gate until the
// last message is acked. A meter, if not nil, measures the CPU of that
// window.
func runRawAMQP(ctx context.Context, pool *pgxpool.Pool, url string, concurrency, prefetch int, n int64, meter *cpuMeter) (time.Duration, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return 0, fmt.Errorf("raw amqp: %w", err)
	}
	defer conn.Close()
	setup, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer setup.Close()
	if err := setup.ExchangeDeclare(rawAMQPQueue, "fanout", true, false, false, false, nil); err != nil {
		return 0, err
	}
	if _, err := setup.QueueDeclare(rawAMQPQueue, true, false, false, false, nil); err != nil {
		return 0, err
	}
	if err := setup.QueueBind(rawAMQPQueue, "", rawAMQPQueue, false, nil); err != nil {
		return 0, err
	}
	if _, err := setup.QueuePurge(rawAMQPQueue, false); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = setup.QueueDelete(rawAMQPQueue, false, false, false)
		_ = setup.ExchangeDelete(rawAMQPQueue, false, false)
	}()

	gate, done := make(chan struct{}), make(chan struct{})
	var handled atomic.Int64
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	consumeCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
	}()
	for i := range concurrency {
		ch, err := conn.Channel()
		if err != nil {
			return 0, err
		}
		if err := ch.Qos(prefetch, 0, false); err != nil {
			return 0, err
		}
		deliveries, err := ch.ConsumeWithContext(consumeCtx, rawAMQPQueue, fmt.Sprintf("raw-%d", i), false, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer ch.Close()
			for d := range deliveries {
				select {
				case <-gate:
				case <-consumeCtx.Done():
					return
				}
				if err := handleRawAMQP(consumeCtx, pool, d); err != nil {
					errs <- err
					return
				}
				if handled.Add(1) == n {
					close(done)
				}
			}
		})
	}

	if err := publishRawAMQP(ctx, conn, n); err != nil {
		return 0, err
	}
	if err := meter.start(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	close(gate)
	select {
	case <-done:
		elapsed := time.Since(start)
		return elapsed, meter.stop(ctx)
	case err := <-errs:
		return 0, fmt.Errorf("raw amqp: %w", err)
	case <-time.After(10 * time.Minute):
		return 0, errors.New("raw amqp: the run did not finish")
	}
}

// handleRawAMQP is the hand-rolled consumer's handling of one delivery.
func handleRawAMQP(ctx context.Context, pool *pgxpool.Pool, d amqp091.Delivery) error {
	var w Work
	if err := json.Unmarshal(d.Body, &w); err != nil {
		return err
	}
	if d.MessageId == "" {
		return errors.New("a delivery without message_id")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, insertInbox, "bench", "", d.MessageId, "bench.Work", time.Now().UTC())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 { // 0: a duplicate, acked without its effects
		if _, err := tx.Exec(ctx, insertBusiness, d.MessageId, w.I); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	return d.Ack(false)
}

// publishRawAMQP publishes Work 0..n-1 to the raw consumer's exchange, as
// the bus's transport publishes them: persistent, message_id a UUIDv7,
// JSON, confirmed by the broker.
func publishRawAMQP(ctx context.Context, conn *amqp091.Connection, n int64) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	const window = 256 // confirms awaited in batches, to publish quickly
	var pending []*amqp091.DeferredConfirmation
	wait := func() error {
		for _, c := range pending {
			ok, err := c.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("raw amqp: the broker refused a publish")
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := range n {
		body, err := json.Marshal(Work{I: i})
		if err != nil {
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, rawAMQPQueue, "", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, MessageId: id.String(), ContentType: "application/json", Body: body,
		})
		if err != nil {
			return err
		}
		if pending = append(pending, c); len(pending) == window {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// rawAMQPPrefetch is the prefetch of the bus's RabbitMQ run, which the
// hand-rolled consumer uses too: the transport's default.
const rawAMQPPrefetch = amqp.PrefetchDefault

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	wsql "github.com/postroom/postroom/transport/sql"
)

// The consumer process of the process tests: this test binary, re-run with
// these variables set. Its failpoint exists only in the test binary.
// workOptions are the options of the child's Work handler.
func workOptions() []bus.HandlerOption {
	opts := []bus.HandlerOption{bus.WithInbox()}
	if n, _ := strconv.Atoi(os.Getenv(childBatch)); n > 1 {
		opts = append(opts, bus.WithBatch(n, 20*time.Millisecond))
	}
	return opts
}

const (
	childEnv       = "POSTROOM_TEST_CHILD"
	childDSN       = "POSTROOM_TEST_CHILD_DSN"
	childAMQP      = "POSTROOM_TEST_CHILD_AMQP"
	childEP        = "POSTROOM_TEST_CHILD_ENDPOINT"
	childCrashAt   = "POSTROOM_TEST_CHILD_CRASH_AT" // SIGKILL self after the Nth handled message commits, before its ack
	childOutbox    = "POSTROOM_TEST_CHILD_OUTBOX"   // "1": each Work also publishes WorkDone through the outbox
	childPoison    = "POSTROOM_TEST_CHILD_POISON"   // N: SIGKILL self 200 ms into handling Work N, before its write; concurrency 1
	childMaxDel    = "POSTROOM_TEST_CHILD_MAX_DELIVERIES"
	childQuorum    = "POSTROOM_TEST_CHILD_QUORUM"    // "1": quorum queues
	childTransport = "POSTROOM_TEST_CHILD_TRANSPORT" // "sql": the SQL transport on the child's database; otherwise RabbitMQ
	childErrors    = "POSTROOM_TEST_CHILD_ERROR_TOPIC"
	childDefault   = "POSTROOM_TEST_CHILD_DEFAULT_RETRY" // "1": the default retry policy, not one that outlasts a restart
	childDelayed   = "POSTROOM_TEST_CHILD_DELAYED"       // "1": delayed retries after 4 s, due messages looked for every 100 ms
	childFailTil   = "POSTROOM_TEST_CHILD_FAIL_UNTIL"    // Unix ms: every Work fails before then
	childBatch     = "POSTROOM_TEST_CHILD_BATCH"         // N: Work's handler commits in batches of up to N (WithBatch)
	childBatchFn   = "POSTROOM_TEST_CHILD_BATCH_HANDLER" // "1": Work's handler is a batch handler (HandleBatch), batches per childBatch
	childSleep     = "POSTROOM_TEST_CHILD_SQL_SLEEP"     // seconds: Work's handler first runs DO SLEEP(s) in its transaction (MySQL/MariaDB), so a server stopping finds statements running
	childGather    = "POSTROOM_TEST_CHILD_GATHER"        // "1": each delivery waits 100 ms before its handler, so that the messages taken together are in flight before a batch forms
)

// WorkDone is published by a consumer process for each Work it handles,
// when the outbox is on.
type WorkDone struct{ N int }

func (WorkDone) MessageName() string { return "test.WorkDone" }

// Work is the message the consumer processes handle.
type Work struct{ N int }

func (Work) MessageName() string { return "test.Work" }

func runConsumer() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "consumer:", err); return 2 }
	db, tr, err := childDeps()
	if err != nil {
		return fail(err)
	}
	crashAt, _ := strconv.Atoi(os.Getenv(childCrashAt))
	poison, hasPoison := os.LookupEnv(childPoison)
	maxDeliveries, _ := strconv.Atoi(os.Getenv(childMaxDel))
	concurrency := 2
	// Retries outlast a database restart (about 8 s), unless the test asks
	// for the defaults.
	retry := bus.RetryPolicy{MaxRetries: 8, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}
	if os.Getenv(childDefault) == "1" {
		retry = bus.RetryPolicy{}
	}
	if hasPoison {
		concurrency = 1 // only the poison message is in flight when it kills the process, or its batch (childBatch)
	}
	var delayed bus.DelayedRetries
	pollDelayed := time.Duration(0)
	if os.Getenv(childDelayed) == "1" {
		retry = bus.RetryPolicy{NoRetries: true}
		delayed.Delays = []time.Duration{4 * time.Second}
		pollDelayed = 100 * time.Millisecond
	}
	failUntil, _ := strconv.ParseInt(os.Getenv(childFailTil), 10, 64)
	sleep, _ := strconv.ParseFloat(os.Getenv(childSleep), 64)
	counters := &metrics.Counters{}
	// The failpoint: after the handler's transaction has committed and
	// before the router acks.
	crashAfterCommit := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil && crashAt > 0 && counters.Total(metrics.Handled) >= uint64(crashAt) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return out, err
		}
	}
	middleware := []message.HandlerMiddleware{crashAfterCommit}
	if os.Getenv(childGather) == "1" {
		middleware = append(middleware, func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				time.Sleep(100 * time.Millisecond)
				return h(msg)
			}
		})
	}
	b, err := bus.New(bus.Config{
		Endpoint:      os.Getenv(childEP),
		Transport:     tr,
		DB:            db,
		Concurrency:   concurrency,
		MaxDeliveries: maxDeliveries,
		ErrorTopic:    os.Getenv(childErrors),
		Retry:         retry,
		Middleware:    middleware,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Cleanup:       bus.CleanupSchedule{Disabled: true},
		Outbox:        os.Getenv(childOutbox) == "1",

		DelayedRetries:      delayed,
		DelayedPollInterval: pollDelayed,
		Metrics:             bus.Metrics{Recorder: counters},
	})
	if err != nil {
		return fail(err)
	}
	handle := func(ctx context.Context, w *Work) error {
		if time.Now().UnixMilli() < failUntil {
			return errors.New("failpoint: fails until " + os.Getenv(childFailTil))
		}
		if hasPoison && strconv.Itoa(w.N) == poison {
			// Not at once: the messages behind it are in flight at the
			// kill, as they would be under load.
			time.Sleep(200 * time.Millisecond)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if sleep > 0 {
			if err := unitofwork.Tx(ctx).Exec("DO SLEEP(?)", sleep).Error; err != nil {
				return err
			}
		}
		if err := unitofwork.Tx(ctx).Exec("INSERT INTO effects (message_id, n) VALUES (?, ?)", strconv.Itoa(w.N), w.N).Error; err != nil {
			return err
		}
		if os.Getenv(childOutbox) == "1" {
			return bus.Publish(ctx, b, &WorkDone{N: w.N})
		}
		return nil
	}
	if os.Getenv(childBatchFn) == "1" {
		err = bus.HandleBatch(b, func(ctx context.Context, ws []*Work) error {
			for _, w := range ws {
				if err := handle(ctx, w); err != nil {
					return err
				}
			}
			return nil
		}, workOptions()...)
	} else {
		err = bus.Handle(b, handle, workOptions()...)
	}
	if err != nil {
		return fail(err)
	}
	if err := serveUntilTerm(b, counters); err != nil {
		return fail(err)
	}
	return 0
}

// brokenPublisher is the relay's failpoint: in crash mode the broker
// refuses every publish, so the outbox cannot relay before the kill.
type brokenPublisher struct{ message.Publisher }

func (brokenPublisher) Publish(string, ...*message.Message) error {
	return errors.New("failpoint: broker unreachable")
}

type failingTransport struct{ transport.Transport }

func (t failingTransport) Publisher() message.Publisher {
	return brokenPublisher{t.Transport.Publisher()}
}

// runOutboxSender handles Order by publishing two Shipped through the
// outbox; with a crash point it dies after the first commit, before any
// relay.
func runOutboxSender() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "outbox sender:", err); return 2 }
	db, broker, err := childDeps()
	if err != nil {
		return fail(err)
	}
	var tr transport.Transport = broker
	crash := os.Getenv(childCrashAt) != "0"
	if crash {
		tr = failingTransport{tr}
	}
	counters := &metrics.Counters{}
	crashAfterCommit := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil && crash && counters.Total(metrics.Handled) > 0 {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return out, err
		}
	}
	var b *bus.Bus
	b, err = bus.New(bus.Config{
		Endpoint: os.Getenv(childEP), Transport: tr, DB: db, Outbox: true,
		Middleware: []message.HandlerMiddleware{crashAfterCommit},
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})),
		Cleanup:    bus.CleanupSchedule{Disabled: true}, Metrics: bus.Metrics{Recorder: counters},
	})
	if err != nil {
		return fail(err)
	}
	if err := bus.Handle(b, shipTwice(&b, false), bus.WithInbox()); err != nil {
		return fail(err)
	}
	if err := serveUntilTerm(b, counters); err != nil {
		return fail(err)
	}
	return 0
}

// runSender sends Work 0..N-1 to an endpoint, retrying each publish through
// a broker outage, a millisecond apart, and prints how many it sent.
func runSender() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "sender:", err); return 2 }
	cfg := amqp.Config{URL: os.Getenv(childAMQP)}
	if os.Getenv(childQuorum) == "1" {
		cfg.QueueType = amqp.QueueQuorum
	}
	tr, err := amqp.New(cfg)
	if err != nil {
		return fail(err)
	}
	b, err := bus.New(bus.Config{Endpoint: "sender", Transport: tr,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))})
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	n, _ := strconv.Atoi(os.Getenv(childCrashAt)) // reused: how many to send
	fmt.Println("ready")
	for i := range n {
		var err error
		for range 200 {
			if err = bus.Send(context.Background(), b, &Work{N: i}, bus.To(os.Getenv(childEP)), bus.WithMessageID(workID(i))); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fail(err)
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("sent %d\n", n)
	return 0
}

// childDeps opens a child process's database and broker from its
// environment.
func childDeps() (*gorm.DB, transport.Transport, error) {
	db, err := store.Open(os.Getenv(childDSN))
	if err != nil {
		return nil, nil, err
	}
	var tr transport.Transport
	if os.Getenv(childTransport) == "sql" {
		tr, err = wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
	} else {
		cfg := amqp.Config{URL: os.Getenv(childAMQP)}
		if os.Getenv(childQuorum) == "1" {
			cfg.QueueType = amqp.QueueQuorum
		}
		tr, err = amqp.New(cfg)
	}
	if err != nil {
		store.Close(db)
		return nil, nil, err
	}
	return db, tr, nil
}

// workID is the message ID of Work n, the same from every sender.
func workID(n int) string { return fmt.Sprintf("work-%d", n) }

// serveUntilTerm runs b, prints "ready" once it handles messages, and on
// SIGTERM closes it and prints its counters for the parent test.
func serveUntilTerm(b *bus.Bus, counters *metrics.Counters) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	fmt.Println("ready")
	if err := <-done; err != nil {
		return err
	}
	_ = b.Close()
	fmt.Printf("counters handled=%d duplicates=%d\n", counters.Total(metrics.Handled), counters.Total(metrics.Duplicate))
	return nil
}

// Command rabbitmq-postgres runs the production shape: three worker
// processes of one endpoint compete on RabbitMQ with a shared PostgreSQL,
// under the inbox, sending events through the outbox, with the cleanup
// schedule running on every worker and firing on one per slot, and each
// worker serving its metrics. It works in a schema of its own and drops it,
// and deletes the queues and exchanges it declared on RabbitMQ for its
// endpoints (the error topic and the exchanges named after message types,
// which every endpoint on the broker shares, are left).
//
//	go run ./examples/rabbitmq-postgres
//
// It reads POSTROOM_POSTGRES_DSN and POSTROOM_AMQP_URL (local defaults).
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// CreateInvoice is the command the workers handle.
type CreateInvoice struct{ OrderID string }

func (CreateInvoice) MessageName() string { return "billing.CreateInvoice" }

// InvoiceCreated is the event each invoice publishes through the outbox.
type InvoiceCreated struct{ OrderID string }

func (InvoiceCreated) MessageName() string { return "billing.InvoiceCreated" }

const (
	orders  = 300
	workers = 3
)

var (
	postgresDSN = cmp.Or(os.Getenv("POSTROOM_POSTGRES_DSN"), "postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable")
	amqpURL     = cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	quiet       = slog.New(slog.DiscardHandler) // the counts below are the check
)

func main() {
	var err error
	if len(os.Args) == 4 && os.Args[1] == "worker" {
		err = worker(os.Args[2], os.Args[3])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq-postgres:", err)
		os.Exit(1)
	}
}

// worker is one process of the billing endpoint.
func worker(dsn, endpoint string) error {
	db, err := store.Open(dsn)
	if err != nil {
		return err
	}
	defer store.Close(db)
	tr, err := amqp.New(amqp.Config{URL: amqpURL})
	if err != nil {
		return err
	}
	defer tr.Close() // after the bus: a bus leaves the transport it is given open
	b, err := bus.New(bus.Config{
		Endpoint:    endpoint,
		Transport:   tr,
		DB:          db,
		Outbox:      true,
		Concurrency: 2,
		Cleanup:     bus.CleanupSchedule{Interval: time.Second},
		// Watermill logs its own shutdown on SIGTERM as errors; the run's
		// counts are the example's check.
		Logger:  slog.New(slog.DiscardHandler),
		Metrics: bus.Metrics{Addr: "127.0.0.1:0"},
	})
	if err != nil {
		return err
	}
	err = bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
		if err := unitofwork.Tx(ctx).Exec("INSERT INTO invoices (order_id) VALUES (?)", m.OrderID).Error; err != nil {
			return err
		}
		return bus.Publish(ctx, b, &InvoiceCreated{OrderID: m.OrderID})
	}, bus.WithInbox())
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	fmt.Println("metrics", b.MetricsAddr())
	err = <-done
	err = errors.Join(err, b.Close())
	// What this process declared, for the parent to delete once every
	// worker has stopped.
	exchanges, queues := tr.Declared()
	for _, e := range exchanges {
		fmt.Println("exchange", e)
	}
	for _, q := range queues {
		fmt.Println("queue", q)
	}
	return err
}

func run() error {
	ctx := context.Background()
	admin, err := store.Open(postgresDSN)
	if err != nil {
		return err
	}
	defer store.Close(admin)
	schema := fmt.Sprintf("example_%d", time.Now().UnixNano())
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		return err
	}
	defer admin.Exec("DROP SCHEMA " + schema + " CASCADE")
	u, err := url.Parse(postgresDSN)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := store.Open(dsn)
	if err != nil {
		return err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return err
	}
	if err := db.Exec("CREATE TABLE invoices (order_id TEXT NOT NULL); CREATE TABLE audit (order_id TEXT NOT NULL)").Error; err != nil {
		return err
	}
	endpoint := schema + "_billing"

	// The queues and exchanges the run declares on RabbitMQ are deleted at
	// the end, once every process that uses them has stopped: left, each
	// run's durable queues would stay, and the audit endpoint's, bound to
	// the shared billing.InvoiceCreated exchange, would collect every later
	// run's events forever.
	var rabbit topology
	defer func() { _, _, _ = rabbit.delete() }()

	// A downstream endpoint counts the events behind its inbox.
	tr, err := amqp.New(amqp.Config{URL: amqpURL})
	if err != nil {
		return err
	}
	defer func() { rabbit.add(tr.Declared()) }()
	defer tr.Close() // after the buses that share it
	audit, err := bus.New(bus.Config{Endpoint: schema + "_audit", Transport: tr, DB: db, Logger: quiet, Cleanup: bus.CleanupSchedule{Disabled: true}})
	if err != nil {
		return err
	}
	defer audit.Close() // on an early return; closing twice is harmless
	if err := bus.Handle(audit, func(ctx context.Context, e *InvoiceCreated) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO audit (order_id) VALUES (?)", e.OrderID).Error
	}, bus.WithInbox()); err != nil {
		return err
	}
	auditCtx, stopAudit := context.WithCancel(ctx)
	defer stopAudit()
	go func() { _ = audit.Run(auditCtx) }()
	<-audit.Running()

	type proc struct {
		cmd *exec.Cmd
		out *bufio.Reader
	}
	var procs []proc
	// stopWorkers stops the workers and takes the names each declared.
	stopWorkers := sync.OnceFunc(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			for {
				line, err := p.out.ReadString('\n')
				if kind, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && kind == "exchange" {
					rabbit.add([]string{name}, nil)
				} else if ok && kind == "queue" {
					rabbit.add(nil, []string{name})
				}
				if err != nil {
					break
				}
			}
			_ = p.cmd.Wait()
		}
	})
	defer stopWorkers()
	var metricsAddrs []string
	for range workers {
		cmd := exec.Command(os.Args[0], "worker", dsn, endpoint)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		p := proc{cmd, bufio.NewReader(out)}
		procs = append(procs, p)
		line, err := p.out.ReadString('\n')
		if err != nil {
			return fmt.Errorf("worker did not start: %w", err)
		}
		metricsAddrs = append(metricsAddrs, strings.TrimSpace(strings.TrimPrefix(line, "metrics ")))
	}

	sender, err := bus.New(bus.Config{Endpoint: schema + "_shop", Transport: tr, Logger: quiet})
	if err != nil {
		return err
	}
	defer sender.Close()
	for i := range orders {
		id := fmt.Sprintf("order-%d", i)
		copies := 1
		if i%10 < 3 {
			copies = 2 // 30% are sent twice with the same message ID
		}
		for range copies {
			if err := bus.Send(ctx, sender, &CreateInvoice{OrderID: id}, bus.To(endpoint), bus.WithMessageID(schema+"-"+id)); err != nil {
				return err
			}
		}
	}
	count := func(table string) (n int64) {
		db.Raw("SELECT COUNT(*) FROM " + table).Scan(&n)
		return n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for count("invoices") < orders || count("audit") < orders {
		if time.Now().After(deadline) {
			return fmt.Errorf("did not finish: %d invoices, %d events", count("invoices"), count("audit"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a few cleanup slots; room for any wrong extra

	var handled, duplicates []string
	var totalDup, cleanups int
	for _, addr := range metricsAddrs {
		body, err := scrape(addr)
		if err != nil {
			return err
		}
		h, d := metric(body, "billing.CreateInvoice", metrics.Handled), metric(body, "billing.CreateInvoice", metrics.Duplicate)
		handled, duplicates = append(handled, fmt.Sprint(h)), append(duplicates, fmt.Sprint(d))
		totalDup += d
		cleanups += metric(body, "postroom.CleanupStore", metrics.Handled)
	}
	stopWorkers()
	_ = sender.Close()
	_ = audit.Close()
	_ = tr.Close() // after both buses that share it
	stopAudit()
	rabbit.add(tr.Declared())
	queues, exchanges, err := rabbit.delete()
	if err != nil {
		return err
	}

	fmt.Printf("workers: %d processes, handled %s, duplicates skipped %s (scraped from their /metrics)\n",
		workers, strings.Join(handled, "/"), strings.Join(duplicates, "/"))
	fmt.Printf("invoices: %d for %d orders (%d sends); events downstream: %d\n", count("invoices"), orders, orders+orders*3/10, count("audit"))
	fmt.Printf("duplicates skipped in all: %d\n", totalDup)
	fmt.Printf("cleanup: %d runs in all on %d workers at a 1s interval: one worker per slot\n", cleanups, workers)
	fmt.Printf("rabbitmq: deleted the %d queues and %d exchanges it declared for its endpoints\n", queues, exchanges)
	return nil
}

// topology is what the run's transports declared on RabbitMQ
// (amqp.Transport.Declared), to be deleted at the end.
type topology struct {
	mu                sync.Mutex
	exchanges, queues []string
	deleted           bool
}

func (t *topology) add(exchanges, queues []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exchanges = append(t.exchanges, exchanges...)
	t.queues = append(t.queues, queues...)
}

// delete deletes, once, the queues and then the exchanges declared, but for
// the names every endpoint on the broker shares: the error topic's exchange
// and queue (other endpoints' failed messages wait there) and the exchanges
// named after a message type (bus.EventTopic), the same on every run. It
// returns how many queues and exchanges it deleted. Call it once every
// process of the run has stopped: a queue with consumers is deleted all
// the same, and a subscriber still running would declare it again.
func (t *topology) delete() (queues, exchanges int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.deleted {
		return 0, 0, nil
	}
	t.deleted = true
	shared := []string{amqp.ExchangeName(bus.ErrorTopicDefault), amqp.QueueName(bus.ErrorTopicDefault, transport.ErrorQueueGroup)}
	for _, name := range []string{bus.MessageName[CreateInvoice](), bus.MessageName[InvoiceCreated](), bus.MessageName[handlers.CleanupStore]()} {
		shared = append(shared, amqp.ExchangeName(bus.EventTopic(name)))
	}
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		return 0, 0, fmt.Errorf("delete what the run declared on RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, fmt.Errorf("delete what the run declared on RabbitMQ: %w", err)
	}
	slices.Sort(t.queues)
	for _, q := range slices.Compact(t.queues) {
		if slices.Contains(shared, q) {
			continue
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return queues, exchanges, fmt.Errorf("delete queue %s: %w", q, err)
		}
		queues++
	}
	slices.Sort(t.exchanges)
	for _, e := range slices.Compact(t.exchanges) {
		if slices.Contains(shared, e) {
			continue
		}
		if err := ch.ExchangeDelete(e, false, false); err != nil {
			return queues, exchanges, fmt.Errorf("delete exchange %s: %w", e, err)
		}
		exchanges++
	}
	return queues, exchanges, nil
}

func scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func metric(body, handler string, e metrics.Event) int {
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return 0
	}
	for _, m := range families["postroom_messages_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["handler"] == handler && labels["event"] == string(e) {
			return int(m.GetCounter().GetValue())
		}
	}
	return 0
}

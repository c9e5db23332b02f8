// Command rabbitmq-postgres runs the production shape: three worker
// processes of one endpoint compete on RabbitMQ with a shared PostgreSQL,
// under the inbox, sending events through the outbox, with the cleanup
// schedule running on every worker and firing on one per slot, and each
// worker serving its metrics. It works in a schema of its own and drops it.
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/store"
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
	b, err := bus.New(bus.Config{
		Endpoint:    endpoint,
		Transport:   tr,
		DB:          db,
		Outbox:      true,
		Concurrency: 2,
		MetricsAddr: "127.0.0.1:0",
		Cleanup:     bus.CleanupSchedule{Interval: time.Second},
		// Watermill logs its own shutdown on SIGTERM as errors; the run's
		// counts are the example's check.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	err = bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
		if err := bus.Tx(ctx).Exec("INSERT INTO invoices (order_id) VALUES (?)", m.OrderID).Error; err != nil {
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
	return errors.Join(err, b.Close())
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

	// A downstream endpoint counts the events behind its inbox.
	tr, err := amqp.New(amqp.Config{URL: amqpURL})
	if err != nil {
		return err
	}
	audit, err := bus.New(bus.Config{Endpoint: schema + "_audit", Transport: tr, DB: db, Logger: quiet, Cleanup: bus.CleanupSchedule{Disabled: true}})
	if err != nil {
		return err
	}
	if err := bus.Handle(audit, func(ctx context.Context, e *InvoiceCreated) error {
		return bus.Tx(ctx).Exec("INSERT INTO audit (order_id) VALUES (?)", e.OrderID).Error
	}, bus.WithInbox()); err != nil {
		return err
	}
	auditCtx, stopAudit := context.WithCancel(ctx)
	defer stopAudit()
	go func() { _ = audit.Run(auditCtx) }()
	<-audit.Running()

	var procs []*exec.Cmd
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
		procs = append(procs, cmd)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return fmt.Errorf("worker did not start: %w", err)
		}
		metricsAddrs = append(metricsAddrs, strings.TrimSpace(strings.TrimPrefix(line, "metrics ")))
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()

	sender, err := bus.New(bus.Config{Endpoint: schema + "_shop", Transport: tr, Logger: quiet})
	if err != nil {
		return err
	}
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
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}
	_ = sender.Close()
	_ = audit.Close()
	stopAudit()

	fmt.Printf("workers: %d processes, handled %s, duplicates skipped %s (scraped from their /metrics)\n",
		workers, strings.Join(handled, "/"), strings.Join(duplicates, "/"))
	fmt.Printf("invoices: %d for %d orders (%d sends); events downstream: %d\n", count("invoices"), orders, orders+orders*3/10, count("audit"))
	fmt.Printf("duplicates skipped in all: %d\n", totalDup)
	fmt.Printf("cleanup: %d runs in all on %d workers at a 1s interval: one worker per slot\n", cleanups, workers)
	return nil
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

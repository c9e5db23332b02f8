// Command two-endpoints runs two endpoints, billing and sales, as two
// processes that talk over RabbitMQ, each with its inbox in PostgreSQL.
// Sales sends the command CreateInvoice to billing; billing writes an
// invoice and publishes the event InvoiceCreated through its outbox; sales
// handles the event. The message types are package messages, which both
// import. docs/two-endpoints.md walks through it.
//
// In two terminals, billing first:
//
//	go run ./examples/two-endpoints billing            # runs until Ctrl-C
//	go run ./examples/two-endpoints sales [-orders 3]  # sends, waits for the events, exits
//
// Without an argument it runs both as child processes of its own, with
// endpoint names and a PostgreSQL schema of their own, checks that every
// order's event came back exactly once, deletes what it declared on
// RabbitMQ and drops the schema, and exits with status 1 if anything was
// lost or doubled:
//
//	go run ./examples/two-endpoints
//
// It reads POSTROOM_POSTGRES_DSN and POSTROOM_AMQP_URL (local defaults).
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/examples/two-endpoints/messages"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

var (
	postgresDSN = cmp.Or(os.Getenv("POSTROOM_POSTGRES_DSN"), "postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable")
	amqpURL     = cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	// Warnings and errors only: the lines each role prints are what it did.
	logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
)

// options are a role's flags.
type options struct {
	prefix   string        // of the endpoint names
	declared bool          // print what the transport declared, at exit
	orders   int           // sales: how many orders to send
	wait     time.Duration // sales: how long to wait for their events
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	role := "all"
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	var err error
	switch role {
	case "billing", "sales":
		o := options{}
		fs := flag.NewFlagSet(role, flag.ExitOnError)
		fs.StringVar(&o.prefix, "prefix", "", "prefix of the endpoint names, for a run beside others on one broker")
		fs.BoolVar(&o.declared, "declared", false, "print the queues and exchanges this process declared on RabbitMQ, at exit")
		if role == "sales" {
			fs.IntVar(&o.orders, "orders", 3, "how many orders to send")
			fs.DurationVar(&o.wait, "wait", time.Minute, "how long to wait for their events")
		}
		_ = fs.Parse(os.Args[2:])
		if role == "billing" {
			err = billing(ctx, o)
		} else {
			err = sales(ctx, o)
		}
	case "all":
		err = all(ctx)
	default:
		err = fmt.Errorf("unknown role %q: run it with billing, sales or no argument", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "two-endpoints "+role+":", err)
		os.Exit(1)
	}
}

// connect opens the database with postroom's tables in it, and the
// transport.
func connect(ctx context.Context) (*gorm.DB, *amqp.Transport, error) {
	db, err := store.Open(postgresDSN)
	if err != nil {
		return nil, nil, err
	}
	// postroom's tables: what `postroom migrate` applies; safe to run from
	// both processes at once.
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		store.Close(db)
		return nil, nil, err
	}
	tr, err := amqp.New(amqp.Config{URL: amqpURL})
	if err != nil {
		store.Close(db)
		return nil, nil, err
	}
	return db, tr, nil
}

// printDeclared prints the names tr declared on RabbitMQ, one a line, for
// the no-argument mode to delete once both processes have stopped.
func printDeclared(tr *amqp.Transport) {
	exchanges, queues := tr.Declared()
	for _, e := range exchanges {
		fmt.Println("exchange", e)
	}
	for _, q := range queues {
		fmt.Println("queue", q)
	}
}

// ordersInAll is how many orders the no-argument mode has sales send.
const ordersInAll = 10

// all runs billing and sales as two child processes, checks what came of
// every order, and cleans up.
func all(ctx context.Context) (err error) {
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

	// The queues and exchanges both processes declared are deleted at the
	// end, once they have stopped, on an early failure too.
	var rabbit topology
	defer func() {
		if _, _, derr := rabbit.delete(); derr != nil {
			err = errors.Join(err, derr)
		}
	}()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Endpoint names of the run's own, so that it shares no queue with
	// a billing or sales started by hand on the same broker.
	prefix := schema + "_"
	env := append(os.Environ(), "POSTROOM_POSTGRES_DSN="+dsn)
	b, err := startChild(self, env, "billing", "-prefix", prefix, "-declared")
	if err != nil {
		return err
	}
	defer b.stop(&rabbit)
	if !b.waitFor("billing: running") {
		return errors.New("billing did not start")
	}

	s, err := startChild(self, env, "sales", "-prefix", prefix, "-declared", "-orders", fmt.Sprint(ordersInAll))
	if err != nil {
		return err
	}
	salesErr := s.stop(&rabbit) // it exits by itself once its events are back
	billingErr := b.stop(&rabbit)
	if ctx.Err() != nil { // Ctrl-C reached both children too
		return errors.New("interrupted")
	}
	transcript := append(b.output(), s.output()...)

	var sent []string
	events := map[string]int{}
	duplicates := -1
	for _, line := range transcript {
		var order string
		var id, amount int
		if _, err := fmt.Sscanf(line, "sales: sent %s (amount %d)", &order, &amount); err == nil {
			sent = append(sent, order)
		} else if _, err := fmt.Sscanf(line, "sales: invoice %d for %s (amount %d)", &id, &order, &amount); err == nil {
			events[order]++
		} else if _, err := fmt.Sscanf(line, "billing: stopped; duplicates skipped: %d", &duplicates); err == nil {
			continue
		}
	}
	invoices := map[string]int{}
	rows, err := admin.Raw("SELECT order_id, COUNT(*) FROM " + schema + ".invoices GROUP BY order_id").Rows()
	if err != nil {
		return err
	}
	for rows.Next() {
		var order string
		var n int
		if err := rows.Scan(&order, &n); err != nil {
			rows.Close()
			return err
		}
		invoices[order] = n
	}
	rows.Close()

	if err := errors.Join(salesErr, billingErr, check(ordersInAll, sent, events, invoices)); err != nil {
		fmt.Fprintln(os.Stderr, "two-endpoints: what billing and sales printed:")
		for _, line := range transcript {
			if !strings.HasPrefix(line, "queue ") && !strings.HasPrefix(line, "exchange ") {
				fmt.Fprintln(os.Stderr, "  "+line)
			}
		}
		return err
	}
	queues, exchanges, err := rabbit.delete()
	if err != nil {
		return err
	}
	fmt.Println("billing and sales: two processes, two endpoints, on RabbitMQ and PostgreSQL")
	fmt.Printf("sales: sent %d orders, each twice with one message ID\n", len(sent))
	fmt.Printf("billing: %d invoices, one per order; %d duplicates skipped by its inbox\n", len(invoices), duplicates)
	fmt.Printf("sales: %d InvoiceCreated events back, one per order\n", len(events))
	fmt.Printf("rabbitmq: deleted the %d queues and %d exchanges it declared for its endpoints\n", queues, exchanges)
	return nil
}

// check returns what went wrong with the orders sent, given how many
// InvoiceCreated events sales got and how many invoice rows billing wrote
// for each: nil when there were orders of them, every one with one event
// and one invoice.
func check(orders int, sent []string, events, invoices map[string]int) error {
	var errs []error
	if len(sent) != orders {
		errs = append(errs, fmt.Errorf("sales sent %d orders, not %d", len(sent), orders))
	}
	for _, order := range sent {
		if n := events[order]; n != 1 {
			errs = append(errs, fmt.Errorf("%s: InvoiceCreated came back %d times, not once", order, n))
		}
		if n := invoices[order]; n != 1 {
			errs = append(errs, fmt.Errorf("%s: %d invoices, not one", order, n))
		}
	}
	for order := range events {
		if !slices.Contains(sent, order) {
			errs = append(errs, fmt.Errorf("%s: an InvoiceCreated for an order sales did not send", order))
		}
	}
	return errors.Join(errs...)
}

// child is a role run as a child process, its output read line by line.
type child struct {
	cmd   *exec.Cmd
	lines chan string // closed when its output ends
	mu    sync.Mutex
	out   []string
	once  sync.Once
	err   error
}

func startChild(self string, env []string, args ...string) (*child, error) {
	cmd := exec.Command(self, args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.mu.Lock()
			c.out = append(c.out, s.Text())
			c.mu.Unlock()
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

// waitFor reads lines until one starts with prefix, and reports whether
// one did before the output ended or a minute passed.
func (c *child) waitFor(prefix string) bool {
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return false
			}
			if strings.HasPrefix(line, prefix) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// stop waits for the process to exit, after a SIGTERM if it is billing,
// adds the names it declared to t, and returns how it exited; called
// again, it returns the same.
func (c *child) stop(t *topology) error {
	c.once.Do(func() {
		role := c.cmd.Args[1]
		if role == "billing" {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
		for range c.lines { // the rest of its output
		}
		if err := c.cmd.Wait(); err != nil {
			c.err = fmt.Errorf("%s: %w", role, err)
		}
		for _, line := range c.output() {
			if kind, name, ok := strings.Cut(line, " "); ok && kind == "exchange" {
				t.add([]string{name}, nil)
			} else if ok && kind == "queue" {
				t.add(nil, []string{name})
			}
		}
	})
	return c.err
}

// output is what the process printed so far.
func (c *child) output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.out)
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
	for _, name := range []string{bus.MessageName[messages.CreateInvoice](), bus.MessageName[messages.InvoiceCreated](), bus.MessageName[handlers.CleanupStore]()} {
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

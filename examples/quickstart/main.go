// Command quickstart runs an invoice flow on the embedded default: a SQLite
// file and the in-memory transport, no server needed. It shows a duplicate
// skipped by the inbox, a stale update rejected, a failing message moved to
// the error topic, a CleanupStore run, and ends with a summary line.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

// CreateInvoice is a command: bill an order once.
type CreateInvoice struct {
	OrderID string
	Amount  int
}

func (CreateInvoice) MessageName() string { return "billing.CreateInvoice" }

// CustomerAddressChanged is an event: the newest address wins.
type CustomerAddressChanged struct {
	CustomerID string
	Address    string
}

func (CustomerAddressChanged) MessageName() string { return "crm.CustomerAddressChanged" }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "postroom-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	db, err := store.Open(filepath.Join(dir, "quickstart.db"))
	if err != nil {
		return err
	}
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return err
	}
	if err := db.Exec(`CREATE TABLE invoices (order_id TEXT NOT NULL, amount INTEGER NOT NULL);
		CREATE TABLE customers (id TEXT PRIMARY KEY, address TEXT NOT NULL)`).Error; err != nil {
		return err
	}

	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	// later is how far the example moves the bus's clock ahead, to show a
	// cleanup days later without waiting for them.
	var later atomic.Int64
	b, err := bus.New(bus.Config{
		Endpoint: "billing",
		DB:       db,
		Logger:   quiet,
		Retry:    bus.RetryPolicy{MaxRetries: 2, InitialBackoff: 10 * time.Millisecond},
		Now:      func() time.Time { return time.Now().Add(time.Duration(later.Load())) },
	})
	if err != nil {
		return err
	}
	err = errors.Join(
		bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
			if m.Amount <= 0 {
				return fmt.Errorf("invoice for %s: amount %d must be positive", m.OrderID, m.Amount)
			}
			return unitofwork.Tx(ctx).Exec("INSERT INTO invoices (order_id, amount) VALUES (?, ?)", m.OrderID, m.Amount).Error
		}, bus.WithInbox()),
		bus.Handle(b, func(ctx context.Context, m *CustomerAddressChanged) error {
			return unitofwork.Tx(ctx).Exec("INSERT INTO customers (id, address) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET address = excluded.address",
				m.CustomerID, m.Address).Error
		}, bus.WithStale()),
	)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()

	// Each message is sent once the one before it has settled, so the
	// story below happens in this order.
	c := b.Counters()
	step := func(send func() error) error {
		before := settled(c)
		if err := send(); err != nil {
			return err
		}
		deadline := time.Now().Add(30 * time.Second)
		for settled(c) == before {
			if time.Now().After(deadline) {
				return errors.New("a message did not settle within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	redelivered := uuid.Must(uuid.NewV7()).String()
	now := time.Now()
	err = errors.Join(
		// An invoice, delivered twice (a broker redelivery): created once.
		step(func() error {
			return bus.Send(ctx, b, &CreateInvoice{OrderID: "order-1", Amount: 120}, bus.WithMessageID(redelivered))
		}),
		step(func() error {
			return bus.Send(ctx, b, &CreateInvoice{OrderID: "order-1", Amount: 120}, bus.WithMessageID(redelivered))
		}),
		step(func() error { return bus.Send(ctx, b, &CreateInvoice{OrderID: "order-2", Amount: 80}) }),
		// An invoice that cannot be created: retried, then the error topic.
		step(func() error { return bus.Send(ctx, b, &CreateInvoice{OrderID: "order-3", Amount: -5}) }),
		// Two address changes arriving newest first: the older one is stale.
		step(func() error {
			return bus.Publish(ctx, b, &CustomerAddressChanged{CustomerID: "c-1", Address: "2 New Street"}, bus.WithVersion("c-1", now))
		}),
		step(func() error {
			return bus.Publish(ctx, b, &CustomerAddressChanged{CustomerID: "c-1", Address: "1 Old Road"}, bus.WithVersion("c-1", now.Add(-time.Minute)))
		}),
	)
	if err != nil {
		return err
	}

	// CleanupStore, which the bus also schedules every 12 hours, eleven
	// days later: the keys are older than the bus's InboxRetention (10 days
	// by default), past which no redelivery is expected, so they go. It
	// never purges a key younger than that, whatever the message asks.
	var keysBefore, keysAfter int64
	db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&keysBefore)
	later.Store(int64(11 * 24 * time.Hour))
	if err := step(func() error {
		return bus.Send(ctx, b, &handlers.CleanupStore{BatchSize: 100})
	}); err != nil {
		return err
	}
	db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&keysAfter)
	stop()
	if err := b.Close(); err != nil {
		return err
	}

	var invoices int64
	var address string
	db.Raw("SELECT COUNT(*) FROM invoices").Scan(&invoices)
	db.Raw("SELECT address FROM customers WHERE id = 'c-1'").Scan(&address)
	fmt.Printf("invoices created: %d (order-1 delivered twice, created once)\n", invoices)
	fmt.Printf("customer c-1 address: %s (the older update was rejected)\n", address)
	fmt.Printf("cleanup: inbox keys before=%d after=%d\n", keysBefore, keysAfter)
	fmt.Printf("summary: received=%d handled=%d duplicates=%d stale=%d errors=%d\n",
		c.Total(metrics.Received), c.Total(metrics.Handled), c.Total(metrics.Duplicate), c.Total(metrics.Stale), c.Total(metrics.Failed))
	return nil
}

// settled counts deliveries that reached an outcome.
func settled(c *metrics.Counters) uint64 {
	return c.Total(metrics.Handled) + c.Total(metrics.Duplicate) + c.Total(metrics.Stale) + c.Total(metrics.Failed)
}

package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

type InvoicePaid struct{ InvoiceID string }

func (InvoicePaid) MessageName() string { return "billing.InvoicePaid" }

// A handler under the inbox: the same message delivered twice changes the
// database once.
func ExampleHandle() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, _ := store.Open(filepath.Join(dir, "app.db"))
	defer store.Close(db)
	ctx := context.Background()
	_, _ = store.Migrate(ctx, db, store.Tables{})
	db.Exec("CREATE TABLE payments (invoice_id TEXT NOT NULL)")

	b, _ := bus.New(bus.Config{Endpoint: "billing", DB: db, Logger: slog.New(slog.DiscardHandler),
		Cleanup: bus.CleanupSchedule{Disabled: true}})
	_ = bus.Handle(b, func(ctx context.Context, m *InvoicePaid) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO payments (invoice_id) VALUES (?)", m.InvoiceID).Error
	}, bus.WithInbox())
	runCtx, stop := context.WithCancel(ctx)
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()

	for range 2 { // a redelivery: the same message ID twice
		_ = bus.Publish(ctx, b, &InvoicePaid{InvoiceID: "inv-1"}, bus.WithMessageID("0190f1d2-0000-7000-8000-000000000001"))
	}
	for b.Counters().Total(metrics.Handled)+b.Counters().Total(metrics.Duplicate) < 2 {
		time.Sleep(time.Millisecond)
	}
	stop()
	_ = b.Close()

	var payments int64
	db.Raw("SELECT COUNT(*) FROM payments").Scan(&payments)
	fmt.Println("payments:", payments, "duplicates:", b.Counters().Total(metrics.Duplicate))
	// Output: payments: 1 duplicates: 1
}

func ExampleMessageName() {
	fmt.Println(bus.MessageName[InvoicePaid]())
	fmt.Println(bus.MessageName[struct{ X int }]())
	type Local struct{}
	fmt.Println(bus.MessageName[Local]())
	// Output:
	// billing.InvoicePaid
	// struct { X int }
	// github.com/postroom/postroom/bus_test.Local
}

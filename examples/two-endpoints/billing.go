package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/examples/two-endpoints/messages"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

// Invoice is a row of billing's own table, invoices.
type Invoice struct {
	ID      int64
	OrderID string
	Amount  int
}

// billing runs the billing endpoint until ctx ends (Ctrl-C).
func billing(ctx context.Context, o options) (err error) {
	db, tr, err := connect(ctx)
	if err != nil {
		return err
	}
	defer store.Close(db)
	defer tr.Close() // after the bus: bus.Close leaves a transport it was given open
	if o.declared {
		defer printDeclared(tr) // once the bus has closed
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		return err
	}

	b, err := bus.New(bus.Config{
		Endpoint:  o.prefix + "billing",
		Transport: tr,
		DB:        db,
		Outbox:    true, // what a handler publishes commits with its transaction
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()

	err = bus.Handle(b, func(ctx context.Context, m *messages.CreateInvoice) error {
		invoice := Invoice{OrderID: m.OrderID, Amount: m.Amount}
		// In the handler's transaction, with the inbox key: once per message.
		if err := unitofwork.Tx(ctx).Create(&invoice).Error; err != nil {
			return err
		}
		// Into the outbox, in the same transaction; relayed to RabbitMQ
		// once it commits.
		err := bus.Publish(ctx, b, &messages.InvoiceCreated{InvoiceID: invoice.ID, OrderID: m.OrderID, Amount: m.Amount})
		if err != nil {
			return err
		}
		fmt.Printf("billing: invoice %d for %s (amount %d)\n", invoice.ID, m.OrderID, m.Amount)
		return nil
	}, bus.WithInbox())
	if err != nil {
		return err
	}

	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	select {
	case <-b.Running():
	case err := <-ran:
		return err
	}
	fmt.Printf("billing: running as endpoint %s; Ctrl-C stops it\n", o.prefix+"billing")
	err = <-ran // until Ctrl-C
	fmt.Printf("billing: stopped; duplicates skipped: %d\n", b.Counters().Total(metrics.Duplicate))
	return err
}

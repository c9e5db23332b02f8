package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/examples/two-endpoints/messages"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
)

// sales runs the sales endpoint: it sends o.orders orders to billing,
// waits for their events, and returns.
func sales(ctx context.Context, o options) (err error) {
	db, tr, err := connect(ctx)
	if err != nil {
		return err
	}
	defer store.Close(db)
	defer tr.Close() // after the bus: bus.Close leaves a transport it was given open
	if o.declared {
		defer printDeclared(tr) // once the bus has closed
	}

	b, err := bus.New(bus.Config{Endpoint: o.prefix + "sales", Transport: tr, DB: db, Logger: logger})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()

	// This run's orders, and how many events came back for each.
	run := uuid.NewString()[:8]
	var mu sync.Mutex
	events := map[string]int{}
	others := 0
	arrived := make(chan struct{}, 1)
	err = bus.Handle(b, func(ctx context.Context, e *messages.InvoiceCreated) error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(e.OrderID, "order-"+run+"-") {
			others++ // another run's order: an earlier sales's, or the no-argument mode's
			return nil
		}
		events[e.OrderID]++
		fmt.Printf("sales: invoice %d for %s (amount %d)\n", e.InvoiceID, e.OrderID, e.Amount)
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil
	}, bus.WithInbox())
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- b.Run(runCtx) }()
	select {
	case <-b.Running():
	case err := <-ran:
		return err
	}

	fmt.Printf("sales: sending %d orders to billing, each twice with one message ID (as a retry would)\n", o.orders)
	for i := range o.orders {
		order := &messages.CreateInvoice{OrderID: fmt.Sprintf("order-%s-%d", run, i+1), Amount: 100 + 10*i}
		id := bus.WithMessageID(uuid.NewString())
		for range 2 {
			if err := bus.Send(ctx, b, order, bus.To(o.prefix+"billing"), id); err != nil {
				if errors.Is(err, transport.ErrNoRoute) {
					err = fmt.Errorf("%w: start billing first (go run ./examples/two-endpoints billing)", err)
				}
				return err
			}
		}
		fmt.Printf("sales: sent %s (amount %d)\n", order.OrderID, order.Amount)
	}

	// Every order's event, then a second more for one that would come twice.
	backAll := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == o.orders
	}
	timeout := time.After(o.wait)
	for !backAll() {
		select {
		case <-arrived:
		case <-timeout:
			return fmt.Errorf("only %d of %d orders' events came back within %s", len(events), o.orders, o.wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	stop()
	err = <-ran
	err = errors.Join(err, b.Close())

	mu.Lock()
	defer mu.Unlock()
	var doubled []string
	for order, n := range events {
		if n > 1 {
			doubled = append(doubled, fmt.Sprintf("%s %d times", order, n))
		}
	}
	if others > 0 {
		fmt.Printf("sales: skipped %d events of other runs' orders that waited in its queue\n", others)
	}
	if len(doubled) > 0 {
		return errors.Join(err, fmt.Errorf("events came back more than once: %s", strings.Join(doubled, ", ")))
	}
	fmt.Printf("sales: %d orders, %d invoices back, each once\n", o.orders, len(events))
	return err
}

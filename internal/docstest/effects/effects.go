// Package effects holds the handlers that docs/effects.md shows, so that
// they build: the page's Go blocks are excerpts of this file, and
// internal/docstest checks that they still are.
package effects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// CreateInvoice is a command whose handler only writes to the database.
type CreateInvoice struct {
	OrderID string
	Amount  int
}

// ChargeCard is a command whose handler calls a payment provider.
type ChargeCard struct {
	OrderID string
	Cents   int64
}

// Register registers both handlers on b; psp is the payment provider's
// base URL.
func Register(b *bus.Bus, psp string) error {
	return errors.Join(registerInvoices(b), registerCharges(b, psp))
}

func registerInvoices(b *bus.Bus) error {
	return bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO invoices (order_id, amount) VALUES (?, ?)", m.OrderID, m.Amount).Error
	}, bus.WithInbox())
}

// jsonBody (in internal/docstest/effects/effects.go) returns m as JSON.
func registerCharges(b *bus.Bus, psp string) error {
	return bus.Handle(b, func(ctx context.Context, m *ChargeCard) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, psp+"/charges", jsonBody(m))
		if err != nil {
			return inbox.NotDone(err) // never sent
		}
		req.Header.Set("Idempotency-Key", inbox.IdempotencyKey(ctx))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // outcome unknown: the request may have been applied
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			return inbox.NotDone(errors.New("provider unavailable")) // certainly not applied: retry
		case resp.StatusCode >= 300:
			return fmt.Errorf("provider: %s", resp.Status)
		}
		return unitofwork.Tx(ctx).Exec("UPDATE orders SET paid = TRUE WHERE id = ?", m.OrderID).Error
	}, bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{OnUnknown: inbox.Retry, Lease: 30 * time.Second}}))
}

// jsonBody is the request body: the command as JSON.
func jsonBody(m *ChargeCard) io.Reader {
	body, _ := json.Marshal(m) // a struct of a string and an integer always encodes
	return bytes.NewReader(body)
}

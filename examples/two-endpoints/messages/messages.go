// Package messages is the contract between the sales and billing
// endpoints: the command billing takes and the event it publishes. Both
// processes import it, so they agree on the fields; each type's
// MessageName is its name on the wire, which names its topic and stays
// the same when the Go type is renamed or moved.
package messages

// CreateInvoice asks billing to invoice an order. It is a command: it goes
// to the billing endpoint alone (bus.To("billing")).
type CreateInvoice struct {
	OrderID string
	Amount  int
}

// MessageName is the name on the wire.
func (CreateInvoice) MessageName() string { return "acme.billing.CreateInvoice" }

// InvoiceCreated says billing has invoiced an order. It is an event: every
// endpoint that handles it gets it.
type InvoiceCreated struct {
	InvoiceID int64
	OrderID   string
	Amount    int
}

// MessageName is the name on the wire.
func (InvoiceCreated) MessageName() string { return "acme.billing.InvoiceCreated" }

// Command edi-invoicing receives invoices as EDI interchanges (an X12 810
// in its ISA envelope and an EDIFACT INVOIC in its UNB envelope) on the
// embedded default (SQLite + in-memory transport). The inbox keys each
// interchange by its sender and control number, so a partner who resends an
// interchange does not create a second invoice. The call to the accounting
// API, which no transaction covers, runs in the inbox's external-effects
// mode: it carries the message's idempotency key, so a retried call does not
// book twice either.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/inbox/edi"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

// Interchange is an EDI interchange, carried as its raw text.
type Interchange struct{ Raw string }

func (Interchange) MessageName() string { return "edi.Interchange" }

// rawEDI is the bus's marshaler: interchanges travel as their own text, so
// the inbox key function reads the envelope straight from the payload.
type rawEDI struct{ bus.JSON }

func (m rawEDI) Marshal(v any) ([]byte, error) {
	if ic, ok := v.(*Interchange); ok {
		return []byte(ic.Raw), nil
	}
	return m.JSON.Marshal(v)
}

func (m rawEDI) Unmarshal(data []byte, v any) error {
	if ic, ok := v.(*Interchange); ok {
		ic.Raw = string(data)
		return nil
	}
	return m.JSON.Unmarshal(data, v)
}

const (
	x12810 = "ISA*00*          *00*          *ZZ*ACMESUPPLY     *ZZ*BUYERCO        *261202*1530*U*00401*000000905*0*P*>~" +
		"GS*IN*ACMESUPPLY*BUYERCO*20261202*1530*905*X*004010~ST*810*0001~BIG*20261202*INV-905~TDS*125000~SE*4*0001~GE*1*905~IEA*1*000000905~"
	edifactInvoic = "UNA:+.? 'UNB+UNOC:3+NORDICPARTS:14+BUYERCO:14+261202:1530+INV00042'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-42+9'MOA+77:830.50'UNT+4+1'UNZ+1+INV00042'"
)

var (
	x12Amount     = regexp.MustCompile(`~TDS\*(\d+)~`)           // cents
	edifactAmount = regexp.MustCompile(`MOA\+77:(\d+)\.(\d\d)'`) // units.cents
)

func amountCents(raw string) (int64, error) {
	var cents int64
	if m := x12Amount.FindStringSubmatch(raw); m != nil {
		_, err := fmt.Sscan(m[1], &cents)
		return cents, err
	}
	if m := edifactAmount.FindStringSubmatch(raw); m != nil {
		var units, frac int64
		if _, err := fmt.Sscan(m[1], &units); err != nil {
			return 0, err
		}
		_, err := fmt.Sscan(m[2], &frac)
		return units*100 + frac, err
	}
	return 0, errors.New("no invoice total (X12 TDS or EDIFACT MOA+77)")
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "edi-invoicing:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	api, err := startAccountingAPI()
	if err != nil {
		return err
	}
	defer api.Close()

	dir, err := os.MkdirTemp("", "postroom-edi")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(filepath.Join(dir, "edi.db"))
	if err != nil {
		return err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return err
	}
	if err := db.Exec("CREATE TABLE invoices (sender TEXT NOT NULL, control TEXT NOT NULL, cents INTEGER NOT NULL)").Error; err != nil {
		return err
	}

	b, err := bus.New(bus.Config{
		Endpoint:  "accounts-payable",
		DB:        db,
		Marshaler: rawEDI{},
		Logger:    slog.New(slog.DiscardHandler),
		Retry:     bus.RetryPolicy{MaxRetries: 3, InitialBackoff: 10 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	var failNextAfterBooking atomic.Bool
	failNextAfterBooking.Store(true)
	err = bus.Handle(b, func(ctx context.Context, m *Interchange) error {
		ic, err := edi.ParseInterchange([]byte(m.Raw))
		if err != nil {
			return err
		}
		cents, err := amountCents(m.Raw)
		if err != nil {
			return err
		}
		if err := unitofwork.Tx(ctx).Exec("INSERT INTO invoices (sender, control, cents) VALUES (?, ?, ?)", ic.Sender, ic.Control, cents).Error; err != nil {
			return err
		}
		// No transaction covers this call. The idempotency key is the same
		// on every attempt and every resend of the interchange, so the API
		// books once whatever happens next.
		if err := api.book(ctx, inbox.IdempotencyKey(ctx), cents); err != nil {
			return err
		}
		if failNextAfterBooking.CompareAndSwap(true, false) {
			// The process "crashes" after the API call, before the commit:
			// the invoice row rolls back and the message is retried.
			return errors.New("lost the connection after booking")
		}
		return nil
	}, bus.WithInbox(bus.Inbox{Key: edi.Key,
		// The accounting API deduplicates on the key: an attempt whose
		// outcome is unknown may run again.
		ExternalEffects: &bus.ExternalEffects{OnUnknown: inbox.Retry}}))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = b.Run(runCtx) }()
	<-b.Running()

	c := b.Counters()
	settled := func() uint64 {
		return c.Total(metrics.Handled) + c.Total(metrics.Duplicate) + c.Total(metrics.Failed)
	}
	for _, raw := range []string{x12810, x12810, edifactInvoic} { // the partner resends the X12 interchange
		before := settled()
		if err := bus.Send(ctx, b, &Interchange{Raw: raw}); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Second); settled() == before; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("an interchange did not settle within 30s")
			}
		}
	}
	stop()
	if err := b.Close(); err != nil {
		return err
	}

	var invoices int64
	db.Raw("SELECT COUNT(*) FROM invoices").Scan(&invoices)
	calls, entries := api.stats()
	fmt.Printf("invoices: %d (X12 ZZ:ACMESUPPLY/000000905 received twice, created once; EDIFACT NORDICPARTS/INV00042 once)\n", invoices)
	fmt.Printf("accounting API: %d calls, %d entries (a call retried after a failure carried the same idempotency key)\n", calls, entries)
	fmt.Printf("summary: received=%d handled=%d duplicates=%d retried=%d errors=%d\n",
		c.Total(metrics.Received), c.Total(metrics.Handled), c.Total(metrics.Duplicate), c.Total(metrics.Retried), c.Total(metrics.Failed))
	return nil
}

// accountingAPI is a small HTTP server on loopback that books an entry once
// per idempotency key, as payment and accounting APIs do.
type accountingAPI struct {
	srv     *http.Server
	url     string
	mu      sync.Mutex
	calls   int
	entries map[string]int64
}

func startAccountingAPI() (*accountingAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &accountingAPI{url: "http://" + ln.Addr().String(), entries: map[string]int64{}}
	a.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		var cents int64
		if _, err := fmt.Sscan(r.URL.Query().Get("cents"), &cents); err != nil || key == "" {
			http.Error(w, "need an Idempotency-Key and cents", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls++
		if _, seen := a.entries[key]; seen {
			w.WriteHeader(http.StatusOK) // already booked: the same answer, no new entry
			return
		}
		a.entries[key] = cents
		w.WriteHeader(http.StatusCreated)
	})}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *accountingAPI) book(ctx context.Context, key string, cents int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/entries?cents=%d", a.url, cents), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("accounting API: %s", resp.Status)
	}
	return nil
}

func (a *accountingAPI) stats() (calls, entries int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, len(a.entries)
}

func (a *accountingAPI) Close() error { return a.srv.Close() }

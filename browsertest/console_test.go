package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	sqltransport "github.com/postroom/postroom/transport/sql"
)

// Invoice is the message the test fails on purpose.
type Invoice struct{ N int }

func (Invoice) MessageName() string { return "test.Invoice" }

// screenshotDir is where POSTROOM_SCREENSHOTS=1 writes the screenshots
// docs/console.md shows.
const screenshotDir = "../docs/img/console"

// chromium returns the browser's path: $POSTROOM_CHROMIUM, else chromium
// (Debian's package) on PATH. A missing browser fails the test:
// scripts/chromium.sh installs it. -short skips the browser tests, except
// under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: skipping the browser test")
	}
	if p := os.Getenv("POSTROOM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("browsertest: no chromium on PATH (nor $POSTROOM_CHROMIUM): install Debian's with `bash scripts/chromium.sh`, or run `make test`")
	return ""
}

// browser starts a headless Chromium with an empty profile and returns a
// tab's context, cancelled (the browser stopped) when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one, one on every later action.
	require.NoError(t, chromedp.Do(tab), "start Chromium")
	ctx, cancelTimeout := context.WithTimeout(tab, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelTab(); cancelAlloc() })
	return ctx
}

// screenshot saves the whole page as docs/img/console/name.png when
// POSTROOM_SCREENSHOTS=1, so that an ordinary run rewrites nothing.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("POSTROOM_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// attr returns the attribute name of the first element sel selects, or
// "" if it has none.
func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("document.querySelector(%q)?.getAttribute(%q) ?? \"\"", sel, name)))
	require.NoError(t, err, sel)
	return s
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	require.NoError(t, err, sel)
	return n
}

// runInvoices runs a bus on tr and db, with errorTopic and no retries, whose Invoice handler (with an inbox) inserts N into the table
// invoices; it fails while the returned flag is set (it starts set), and
// always for N 2, unrecoverably. metricsAddr is bus.Config.Metrics.Addr.
func runInvoices(t *testing.T, tr transport.Transport, db *gorm.DB, errorTopic, metricsAddr string) (*bus.Bus, context.Context, *atomic.Bool) {
	t.Helper()
	require.NoError(t, db.Exec("CREATE TABLE invoices (n INTEGER NOT NULL)").Error)
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("billing"), Transport: tr, DB: db, ErrorTopic: errorTopic,
		Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t), Metrics: bus.Metrics{Addr: metricsAddr}})
	require.NoError(t, err)
	broken := new(atomic.Bool)
	broken.Store(true)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *Invoice) error {
		switch {
		case m.N == 2:
			return bus.Unrecoverable(errors.New("customer 2 has no VAT number")) // no retry helps
		case broken.Load():
			return errors.New("tax service down: 503 Service Unavailable")
		}
		return unitofwork.Tx(ctx).Exec("INSERT INTO invoices (n) VALUES (?)", m.N).Error
	}, bus.WithInbox()))
	return b, testbus.Run(t, b), broken
}

// TestConsoleInChromium: a bus on RabbitMQ and PostgreSQL fails messages on
// purpose; in the console, the operator sees them grouped with their
// reason, opens one, retries it once the handler is fixed and sees it
// handled and gone; deletes a failure group; resolves an unresolved
// external effect; triggers the
// cleanup schedule and sees it fire; looks the message up in the inbox.
// A POST without the CSRF token is refused, and a read-only console shows
// no action.
func TestConsoleInChromium(t *testing.T) {
	ctx := browser(t)
	url := testenv.RequireAMQP(t)
	db := testenv.Postgres(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	errorTopic := testenv.Name("error_")
	b, busCtx, broken := runInvoices(t, tr, db, errorTopic, "127.0.0.1:0")
	c := b.Counters()

	// The console charts the bus from its Prometheus endpoint, sampled
	// from before the first message.
	con, err := console.New(console.Config{DB: db, AMQPURL: url, ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Metrics: []string{"http://" + b.MetricsAddr() + "/metrics"}, SampleInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan error, 1)
	go func() { sampled <- con.Run(sampling) }()
	t.Cleanup(func() { stopSampling(); require.NoError(t, <-sampled) })
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")))
	for deadline := time.Now().Add(20 * time.Second); attr(t, ctx, "#activity-source", "data-sampled") == ""; {
		require.True(t, time.Now().Before(deadline), "the console sampled the bus's metrics within 20s")
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
	}

	for _, m := range []struct {
		n  int
		id string
	}{{1, "inv-1"}, {2, "inv-2"}, {3, "inv-3"}} {
		require.NoError(t, bus.Send(busCtx, b, &Invoice{N: m.n}, bus.To(b.Endpoint()), bus.WithMessageID(m.id)))
	}
	require.Eventually(t, func() bool { return c.Total(metrics.Failed) == 3 }, 20*time.Second, 10*time.Millisecond)

	// An external effect whose process stopped mid-call: lease run out.
	d, err := dialects.Of(db)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, db.Exec(d.ClaimInsert(inbox.TableDefault), "payments/Capture", "shop", "pay-42", "test.Capture",
		d.Time(now.Add(-time.Hour)), d.Time(now.Add(-50*time.Minute)), "sum", []byte("{}")).Error)

	// Overview: what needs attention first.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#attention"))))
	attention := text(t, ctx, "#attention")
	require.Contains(t, attention, "3 failed messages")
	require.Contains(t, attention, "1 unresolved external effect:")

	// Failed messages, grouped by handler and reason.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/failed"]`)), chromedp.WaitVisible(chromedp.CSS("table.failed"))))
	require.Equal(t, 2, count(t, ctx, "section.group"), "two failure groups")
	require.Contains(t, text(t, ctx, `tr[data-id="inv-1"] td.reason`), "tax service down")
	require.Contains(t, text(t, ctx, `tr[data-id="inv-2"] td.reason`), "customer 2 has no VAT number")
	screenshot(t, ctx, "failed")

	// One message: headers and body.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-id="inv-1"] td a`)), chromedp.WaitVisible(chromedp.CSS("pre.payload"))))
	require.JSONEq(t, `{"N":1}`, text(t, ctx, "pre.payload"))
	require.Contains(t, text(t, ctx, "main"), "postroom-error-reason")
	screenshot(t, ctx, "message")

	// Fixed: retry it, after the confirmation.
	broken.Store(false)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("a.retry")), chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	group := bus.GroupOf(b.Endpoint(), "test.Invoice") // the endpoint group the confirmation names
	require.Contains(t, text(t, ctx, "form.confirm"), "Retry message inv-1 of endpoint group "+group+": 1 message(s)")
	screenshot(t, ctx, "confirm-retry")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("p.done"))))
	require.Contains(t, text(t, ctx, "p.done"), "Retried message inv-1 of endpoint group "+group+" (1)")
	require.Eventually(t, func() bool { return c.Total(metrics.Handled) == 1 }, 20*time.Second, 10*time.Millisecond, "the retried message is handled")
	var n []int
	require.NoError(t, db.Raw("SELECT n FROM invoices").Scan(&n).Error)
	require.Equal(t, []int{1}, n)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/failed"), chromedp.WaitVisible(chromedp.CSS("table.failed"))))
	require.Zero(t, count(t, ctx, `tr[data-id="inv-1"]`), "gone from the failed list")
	require.Equal(t, 1, count(t, ctx, `tr[data-id="inv-3"]`))

	// inv-1 again: the inbox skips it as a duplicate. The overview charts
	// the handler's handled, duplicates and failed since the console started.
	require.NoError(t, bus.Send(busCtx, b, &Invoice{N: 1}, bus.To(b.Endpoint()), bus.WithMessageID("inv-1")))
	require.Eventually(t, func() bool { return c.Total(metrics.Duplicate) == 1 }, 20*time.Second, 10*time.Millisecond)
	row := `#activity tr[data-row="test.Invoice"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#activity-source"))))
	deadline := time.Now().Add(20 * time.Second)
	for count(t, ctx, row+`td.duplicate[data-total="1"]`) == 0 {
		require.True(t, time.Now().Before(deadline), "the duplicate is charted within 20s")
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#activity-source"))))
	}
	require.Equal(t, "1", attr(t, ctx, row+"td.handled", "data-total"))
	require.Equal(t, "3", attr(t, ctx, row+"td.failed", "data-total"))
	require.Equal(t, "0", attr(t, ctx, row+"td.stale", "data-total"))
	for _, event := range []string{"handled", "duplicate", "failed"} {
		require.Equal(t, 1, count(t, ctx, row+"td."+event+" svg rect"), "%s: one bar", event)
	}
	require.Zero(t, count(t, ctx, row+"td.stale svg rect"))
	require.Contains(t, text(t, ctx, "#activity-source"), "Sampled from 1 Prometheus endpoint")
	screenshot(t, ctx, "overview")

	// Delete a failure group, after the confirmation.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/failed"), chromedp.WaitVisible(chromedp.CSS("table.failed"))))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("section.group")].find(s =>
		s.textContent.includes("no VAT number")).querySelector("a.danger")`)), chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	require.Contains(t, text(t, ctx, "form.confirm"), `Delete the messages of test.Invoice of endpoint group `+group+` that failed like "customer … has no VAT number": 1 message(s)`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("p.done"))))
	require.Zero(t, count(t, ctx, `tr[data-id="inv-2"]`), "deleted")
	require.Equal(t, 1, count(t, ctx, `tr[data-id="inv-3"]`), "the other group stays")
	require.EqualValues(t, 1, c.Total(metrics.Handled), "a deleted message is not handled")

	// Inbox lookup: inv-1 was handled by the invoice handler.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/inbox"]`)), chromedp.WaitVisible(chromedp.CSS(`input[name="id"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="id"]`), "inv-1"), chromedp.Submit(chromedp.CSS(`input[name="id"]`)),
		chromedp.WaitVisible(chromedp.CSS("#keys"))))
	keys := text(t, ctx, "#keys")
	require.Contains(t, keys, "test.Invoice")
	require.Contains(t, keys, "done")
	screenshot(t, ctx, "inbox")

	// Unresolved external effect: resolve as done.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/unresolved"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="pay-42"]`))))
	require.Contains(t, text(t, ctx, `tr[data-id="pay-42"]`), idempotency.Key("payments/Capture", "shop", "pay-42"))
	screenshot(t, ctx, "unresolved")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("a.resolve-done")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#no-unresolved"))))
	require.Contains(t, text(t, ctx, "p.done"), "Resolved message pay-42 of payments/Capture as done")

	// Schedules: trigger the cleanup schedule and see it fire.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/schedules"]`)), chromedp.WaitVisible(chromedp.CSS("#schedules"))))
	row = `tr[data-name="postroom.cleanup.` + b.Endpoint() + `"]`
	require.Equal(t, "-", text(t, ctx, row+" td.last"), "never fired yet")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+" button.trigger")), chromedp.WaitVisible(chromedp.CSS("p.done"))))
	require.Contains(t, text(t, ctx, "p.done"), "Triggered postroom.cleanup.")
	deadline = time.Now().Add(20 * time.Second)
	for text(t, ctx, row+" td.last") == "-" {
		require.True(t, time.Now().Before(deadline), "the triggered schedule fired within 20s")
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#schedules"))))
	}
	screenshot(t, ctx, "schedules")

	// A form without the CSRF token, posted from the console's own page
	// (the page's CSP forbids fetch), is refused.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`(() => {
		const f = document.createElement("form");
		f.method = "post"; f.action = "/schedules/action";
		for (const [k, v] of Object.entries({name: "postroom.cleanup.`+b.Endpoint()+`", action: "pause"})) {
			const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.append(i);
		}
		document.body.append(f); f.submit();
	})()`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		return err == nil && strings.Contains(body, "missing or wrong CSRF token")
	}, 10*time.Second, 50*time.Millisecond, "refused for its missing CSRF token")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/schedules"), chromedp.WaitVisible(chromedp.CSS("#schedules"))))
	require.Equal(t, 1, count(t, ctx, row+" button.pause"), "not paused")

	// Read-only: the same pages, no action anywhere. (Its Limit of 1 is
	// reached by inv-3: the overview says there may be more.)
	ro, err := console.New(console.Config{DB: db, AMQPURL: url, ErrorTopic: errorTopic, ReadOnly: true, Limit: 1, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	roSrv := httptest.NewServer(ro)
	t.Cleanup(roSrv.Close)
	for _, path := range []string{"/", "/failed", "/failed/message?id=inv-3", "/unresolved", "/schedules"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(roSrv.URL+path), chromedp.WaitVisible(chromedp.CSS("#read-only"))))
		require.Zero(t, count(t, ctx, `form[method="post"], a.button, button.trigger, button.pause, button.resume`), path)
		if path == "/" {
			require.Contains(t, text(t, ctx, "#attention"), "at least 1 failed message")
		}
		if path == "/failed" {
			require.Contains(t, text(t, ctx, "main"), "tax service down", "read-only still shows")
			screenshot(t, ctx, "read-only")
		}
	}
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"))
}

// TestConsoleSQLTransportInChromium: a bus on the SQL transport
// (PostgreSQL, no broker) fails a message; the console, given only the
// database, charts the failure, lists it, retries it once the handler is
// fixed (through the delayed table, to that handler alone), and the bus
// handles it: the chart of the handled messages, from the inbox, shows it.
func TestConsoleSQLTransportInChromium(t *testing.T) {
	ctx := browser(t)
	db := testenv.Postgres(t)
	tr, err := sqltransport.New(sqltransport.Config{DB: db})
	require.NoError(t, err)
	errorTopic := testenv.Name("error_")
	b, busCtx, broken := runInvoices(t, tr, db, errorTopic, "")
	c := b.Counters()
	require.NoError(t, bus.Send(busCtx, b, &Invoice{N: 7}, bus.To(b.Endpoint()), bus.WithMessageID("inv-7")))
	require.Eventually(t, func() bool { return c.Total(metrics.Failed) == 1 }, 20*time.Second, 10*time.Millisecond)

	con, err := console.New(console.Config{DB: db, ErrorTopic: errorTopic, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	consumer := b.Endpoint() + "/test.Invoice"
	row := `#activity tr[data-row="` + consumer + `"] `

	// The overview: the failure needs attention and is charted, from the
	// error topic's table.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#activity"))))
	require.Contains(t, text(t, ctx, "#attention"), "1 failed message in the error topic "+errorTopic)
	require.Equal(t, "1", attr(t, ctx, `#activity tr[data-row="test.Invoice"] td.failed`, "data-total"),
		"a handler with no inbox key yet: its row is the handler's")

	// Failed messages: the table of the SQL transport.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/failed"]`)), chromedp.WaitVisible(chromedp.CSS("table.failed"))))
	require.Contains(t, text(t, ctx, "main .hint"), "table watermill_"+errorTopic+" of the SQL transport")
	require.Contains(t, text(t, ctx, `tr[data-id="inv-7"] td.reason`), "tax service down")

	// Fixed: retry it.
	broken.Store(false)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-id="inv-7"] a.retry`)), chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	require.Contains(t, text(t, ctx, "form.confirm"), "through the delayed table")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("p.done"))))
	require.Contains(t, text(t, ctx, "p.done"), "Retried message inv-7 of endpoint group "+bus.GroupOf(b.Endpoint(), "test.Invoice")+" (1)")
	require.Equal(t, 1, count(t, ctx, "#no-failed"), "gone from the error topic")
	require.Eventually(t, func() bool { return c.Total(metrics.Handled) == 1 }, 20*time.Second, 10*time.Millisecond, "the retried message is handled")
	var n []int
	require.NoError(t, db.Raw("SELECT n FROM invoices").Scan(&n).Error)
	require.Equal(t, []int{7}, n)

	// The overview charts it as handled, from the inbox.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#activity"))))
	require.Equal(t, "1", attr(t, ctx, row+"td.handled", "data-total"))
	require.Equal(t, 1, count(t, ctx, row+"td.handled svg rect"))
	require.Equal(t, "n/a", text(t, ctx, row+"td.duplicate"), "duplicates need the metrics")
	require.Contains(t, text(t, ctx, "#attention"), "Nothing needs attention")
	screenshot(t, ctx, "overview-database")
}

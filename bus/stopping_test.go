package bus_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
	wsql "github.com/postroom/postroom/transport/sql"
)

// TestStopDuringTheLastAttemptReturnsTheMessage: a bus stopped while a
// message is in its last attempt, which then fails because its context
// ended, returns the message to the broker; the next run handles it.
// Counted as the last of its retries, the failure would send the message
// to the error topic with "context canceled".
func TestStopDuringTheLastAttemptReturnsTheMessage(t *testing.T) {
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			db, newTransport := s.open(t)
			errorTopic := testenv.Name("error_")
			endpoint := testenv.Name("ep")
			tr := newTransport()
			errorLines := &errorCounter{inner: testenv.Logger(t).Handler(), n: &atomic.Int32{}}
			b := newStoppingBusLogging(t, endpoint, db, tr, errorTopic, slog.New(errorLines))
			t.Cleanup(func() { _ = b.Close() })
			var attempts atomic.Int32
			last := make(chan struct{})
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
				if attempts.Add(1) < 3 { // MaxRetries 2: the third attempt is the last
					return errors.New("fails")
				}
				close(last)
				<-ctx.Done() // the bus stops during the attempt
				// What a handler's database call returns then: not always
				// context.Canceled (which Watermill would not log).
				return sql.ErrTxDone
			}))
			errSub, err := tr.Subscriber(testenv.Name("errors_"), 1)
			require.NoError(t, err)
			require.NoError(t, errSub.(message.SubscribeInitializer).SubscribeInitialize(errorTopic))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			<-b.Running()
			require.NoError(t, bus.Send(ctx, b, &CreateInvoice{OrderID: "o-1"}))
			select {
			case <-last:
			case <-time.After(20 * time.Second):
				t.Fatal("no third attempt")
			}
			cancel()
			require.NoError(t, <-done)
			require.Zero(t, b.Counters().Total(metrics.Failed), "the stop sent the message to the error topic")
			require.Zero(t, errorLines.n.Load(), "a routine stop logged at error (Watermill's \"Handler returned error\", watermill-sql's \"could not commit tx\")")

			// A second bus of the endpoint on the same transport (Close
			// would close it, and the in-memory one is the broker).
			again := newStoppingBus(t, endpoint, db, tr, errorTopic)
			handled := make(chan struct{})
			require.NoError(t, bus.Handle(again, func(context.Context, *CreateInvoice) error {
				close(handled)
				return nil
			}))
			ep := start(t, again, errorTopic)
			select {
			case <-handled:
			case m := <-ep.errors:
				t.Fatalf("the message reached the error topic: %s", m.Metadata)
			case <-time.After(20 * time.Second):
				t.Fatal("the message returned at the stop was not delivered again")
			}
		})
	}
}

// TestADeadlineIsNotAStop: a message whose context ends during its last
// attempt while the bus runs on (a Middleware's timeout here; the SQL
// transport's ack deadline does the same after 30 s) goes to the error
// topic with the handler's error, like any message whose retries ran out.
// Taking every ended context for a stop nacks it instead: it is
// redelivered until the poison-loop guard moves it aside with "delivered
// N times", the real error lost.
func TestADeadlineIsNotAStop(t *testing.T) {
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			db, newTransport := s.open(t)
			errorTopic := testenv.Name("error_")
			timeout := func(h message.HandlerFunc) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					ctx, cancel := context.WithTimeout(msg.Context(), 200*time.Millisecond)
					defer cancel()
					msg.SetContext(ctx)
					return h(msg)
				}
			}
			b := newStoppingBus(t, testenv.Name("ep"), db, newTransport(), errorTopic, timeout)
			var attempts atomic.Int32
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
				if attempts.Add(1)%3 == 0 { // the last attempt outlives the deadline
					<-ctx.Done()
				}
				return errors.New("the real failure")
			}))
			ep := start(t, b, errorTopic)
			require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o-1"}))
			select {
			case m := <-ep.errors:
				require.Equal(t, "the real failure", m.Metadata.Get(metadata.ErrorReason))
			case <-time.After(20 * time.Second):
				t.Fatal("the message did not reach the error topic")
			}
			require.EqualValues(t, 3, attempts.Load(), "one delivery: three attempts, no redelivery")
		})
	}
}

func newStoppingBus(t *testing.T, endpoint string, db *gorm.DB, tr transport.Transport, errorTopic string, mw ...message.HandlerMiddleware) *bus.Bus {
	t.Helper()
	return newStoppingBusLogging(t, endpoint, db, tr, errorTopic, testenv.Logger(t), mw...)
}

func newStoppingBusLogging(t *testing.T, endpoint string, db *gorm.DB, tr transport.Transport, errorTopic string, log *slog.Logger, mw ...message.HandlerMiddleware) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Config{
		Endpoint:   endpoint,
		Transport:  tr,
		DB:         db,
		ErrorTopic: errorTopic,
		Retry:      bus.RetryPolicy{MaxRetries: 2, InitialBackoff: 5 * time.Millisecond},
		Logger:     log,
		Middleware: mw,
		// A handler that waits for its context (the stop) waits this long.
		// The default, 20 s, held the message that long, and on the SQL
		// transport on PostgreSQL its read transaction held back every
		// SQL-transport reader on the server (transport/sql's package
		// doc): transport/sql's tests, which Watermill's universal suite
		// gives 15 s per message, once failed beside it in CI.
		StopTimeout: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	return b
}

// errorCounter counts the records at error level and passes every record on.
type errorCounter struct {
	inner slog.Handler
	n     *atomic.Int32 // shared with the handlers made by WithAttrs and WithGroup
}

func (h *errorCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.inner.Enabled(ctx, l)
}

func (h *errorCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *errorCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorCounter{inner: h.inner.WithAttrs(as), n: h.n}
}

func (h *errorCounter) WithGroup(g string) slog.Handler {
	return &errorCounter{inner: h.inner.WithGroup(g), n: h.n}
}

// TestADispatchCutShortByTheStopIsLoggedAtError: a handler with the inbox
// commits, the broker refuses the events it sent, and the bus stops while
// the dispatch retries. Without Config.Outbox the events are lost (the
// redelivery is a duplicate the inbox skips, docs/guarantees.md); that is
// said at error, naming them, not left to a warning per retry and "the
// message goes back to the broker" at info.
func TestADispatchCutShortByTheStopIsLoggedAtError(t *testing.T) {
	tr := gochannel.New(gochannel.Config{})
	logs := newRecordedLogs()
	b, err := bus.New(bus.Config{Endpoint: "warehouse", Transport: failingTransport{tr}, DB: testenv.SQLite(t),
		StopTimeout: 2 * time.Second, // the stop cuts the dispatch at its end (the default, 20 s, only made the test slow)
		Logger:      slog.New(logs), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, shipTwice(&b, false), bus.WithInbox()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	order := message.NewMessage(uuid.NewString(), []byte(`{"ID":"o-1"}`))
	order.Metadata.Set(metadata.MessageType, "test.Order")
	require.NoError(t, tr.Publisher().Publish("test.Order", order)) // past the refusing publisher
	require.Eventually(t, func() bool { _, n := logs.find(slog.LevelWarn, "bus: dispatch after commit failed"); return n > 0 },
		20*time.Second, 10*time.Millisecond, "the dispatch did not fail")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
	lost, _ := logs.find(slog.LevelError, "messages it sent were not dispatched")
	require.NotEmpty(t, lost, "the events lost with the stop were not logged at error")
	require.Contains(t, lost, order.UUID)
	require.Equal(t, 2, strings.Count(lost, "test.Shipped/"), "both events named: %s", lost)
}

// recordedLogs keeps every record as one line of text, shared with the
// handlers made by WithAttrs and WithGroup.
type recordedLogs struct {
	lines *recordedLines
	attrs []slog.Attr
}

type recordedLines struct {
	mu    sync.Mutex
	lines []recordedLine
}

type recordedLine struct {
	level slog.Level
	text  string
}

func newRecordedLogs() *recordedLogs { return &recordedLogs{lines: &recordedLines{}} }

func (h *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.lines.mu.Lock()
	defer h.lines.mu.Unlock()
	h.lines.lines = append(h.lines.lines, recordedLine{r.Level, b.String()})
	return nil
}

func (h *recordedLogs) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordedLogs{lines: h.lines, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *recordedLogs) WithGroup(string) slog.Handler { return h }

// atLeast returns the first record at level or above, and how many there are.
func (h *recordedLogs) atLeast(level slog.Level) (first string, n int) {
	h.lines.mu.Lock()
	defer h.lines.mu.Unlock()
	for _, l := range h.lines.lines {
		if l.level >= level {
			if n == 0 {
				first = l.text
			}
			n++
		}
	}
	return first, n
}

// find returns the first line at level containing substr, and how many there are.
func (h *recordedLogs) find(level slog.Level, substr string) (first string, n int) {
	h.lines.mu.Lock()
	defer h.lines.mu.Unlock()
	for _, l := range h.lines.lines {
		if l.level == level && strings.Contains(l.text, substr) {
			if n == 0 {
				first = l.text
			}
			n++
		}
	}
	return first, n
}

// joined returns every line at level containing substr, one a line.
func (h *recordedLogs) joined(level slog.Level, substr string) string {
	h.lines.mu.Lock()
	defer h.lines.mu.Unlock()
	var all []string
	for _, l := range h.lines.lines {
		if l.level == level && strings.Contains(l.text, substr) {
			all = append(all, l.text)
		}
	}
	return strings.Join(all, "\n")
}

// TestAHandlerOutlivingTheSQLAckDeadline: on the SQL transport a handler
// that ignores its context and succeeds after the ack deadline has its ack
// dropped by watermill-sql, which reads the message again. The copy waits
// for the first run (two subscriptions here: never two runs at once), each
// late ack is logged at error and counted, and the poison-loop guard moves
// the message to the error topic after MaxDeliveries. Without that, it
// runs again every deadline, two runs overlapping, without a log line,
// forever.
func TestAHandlerOutlivingTheSQLAckDeadline(t *testing.T) {
	for _, open := range []struct {
		name string
		db   func(testing.TB) *gorm.DB
	}{{"postgres", testenv.Postgres}, {"mariadb", testenv.MySQL}} {
		t.Run(open.name, func(t *testing.T) {
			t.Parallel()
			db := open.db(t)
			tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond, AckDeadline: time.Second})
			require.NoError(t, err)
			logs := newRecordedLogs()
			errorTopic := testenv.Name("error_")
			b, err := bus.New(bus.Config{Endpoint: testenv.Name("ep"), Transport: tr, DB: db, ErrorTopic: errorTopic,
				Concurrency: 2, MaxDeliveries: 3, Logger: slog.New(logs), Cleanup: bus.CleanupSchedule{Disabled: true}})
			require.NoError(t, err)
			var runs, running, overlaps atomic.Int32
			var mu sync.Mutex
			var seen []string // each run's start and the transport's count of late acks before it
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
				mu.Lock()
				seen = append(seen, time.Now().Format("05.000")+" count="+bus.Metadata(ctx)[metadata.DeliveryCount])
				mu.Unlock()
				runs.Add(1)
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				time.Sleep(1500 * time.Millisecond) // past the deadline, ignoring the context
				return nil
			}))
			ep := start(t, b, errorTopic)
			require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o-1"}))
			select {
			case m := <-ep.errors:
				require.Contains(t, m.Metadata.Get(metadata.ErrorReason), "delivered 3 times without being handled")
			case <-time.After(60 * time.Second):
				t.Fatalf("the message did not reach the error topic (%d runs)", runs.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			warned, _ := logs.atLeast(slog.LevelWarn)
			require.EqualValues(t, 3, runs.Load(), "runs: %v; first warning: %s", seen, warned)
			require.Zero(t, overlaps.Load(), "a copy ran while the first still ran")
			late, n := logs.find(slog.LevelError, "acked after the transport's ack deadline")
			require.Equal(t, 3, n, late)
		})
	}
}

package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/internal/testenv"
)

// TestAnOutageMidBatchLosesNothing: the broker takes the first message of
// a batch the relay read, then refuses everything for longer than the
// relay's ack deadline (30 s in production, shortened here), then comes
// back: every message is relayed. On MySQL/MariaDB watermill-sql's ack
// marks every row of the batch at the deadline; left to it, the rows
// behind the refused one are never relayed, without a log line.
func TestAnOutageMidBatchLosesNothing(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &outageBroker{up: 1, downFor: 1500 * time.Millisecond}
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, ackDeadline: 300 * time.Millisecond})
			require.NoError(t, err)
			want, stop := relayOrders(t, db, o, 5)
			deadline := time.Now().Add(15 * time.Second)
			for !slices.Equal(dest.relayed(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("relayed %v of %v after the outage", dest.relayed(), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
		})
	}
}

// relayOrders commits n messages (m0, m1, …) to topic "orders" in one
// transaction and runs o's relay; stop closes o and waits for Run.
func relayOrders(t *testing.T, db *gorm.DB, o *Outbox, n int) (ids []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		var msgs []*message.Message
		for i := range n {
			ids = append(ids, fmt.Sprintf("m%d", i))
			msgs = append(msgs, message.NewMessage(ids[i], []byte("{}")))
		}
		return o.Publish(ctx, tx, "orders", msgs...)
	}))
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	return ids, func() {
		require.NoError(t, o.Close())
		cancel()
		<-done
	}
}

// outageBroker takes up messages, then refuses every publish for downFor,
// then takes everything again.
type outageBroker struct {
	up      int
	downFor time.Duration

	mu        sync.Mutex
	downUntil time.Time
	got       []string
}

func (b *outageBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) == b.up && b.downUntil.IsZero() {
		b.downUntil = time.Now().Add(b.downFor)
	}
	if len(b.got) >= b.up && time.Now().Before(b.downUntil) {
		return errors.New("broker down")
	}
	for _, m := range msgs {
		if topic != "orders" {
			return fmt.Errorf("published to %s", topic)
		}
		b.got = append(b.got, m.UUID)
	}
	return nil
}

func (b *outageBroker) Close() error { return nil }

func (b *outageBroker) relayed() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

// TestAnOutageLogsAFewLines: the broker refuses every publish, the error
// topic's too, for 2 s while the relay polls every 10 ms, then comes back.
// The relay says so once at warn, reminds at most every outageReminder
// (shortened here), says once at info that it recovered, and relays every
// message once. Two lines at error per poll (its own "relay failed … will
// retry" and Watermill's "Handler returned error") make thousands of lines
// in one outage, which loses nothing.
func TestAnOutageLogsAFewLines(t *testing.T) {
	for _, store := range testenv.ServerDatabases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			dest := &outageBroker{downFor: 2 * time.Second}
			logs := &logLines{}
			wm := logsink.New(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))).Watermill()
			o, err := New(Config{DB: db, Destination: dest, PollInterval: 10 * time.Millisecond, Logger: wm,
				outageReminder: 700 * time.Millisecond})
			require.NoError(t, err)
			want, stop := relayOrders(t, db, o, 5)
			deadline := time.Now().Add(20 * time.Second)
			for len(dest.relayed()) < len(want) {
				if time.Now().After(deadline) {
					t.Fatalf("relayed %v of %v after the outage", dest.relayed(), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // a message relayed twice would show now
			stop()
			require.Equal(t, want, dest.relayed(), "every message relayed once, in order")

			warn, errs, info := logs.at("WARN"), logs.at("ERROR"), logs.at("INFO")
			t.Logf("%d lines at warn, %d at error", len(warn), len(errs))
			if len(errs) > 0 {
				t.Fatalf("%d lines at error for an outage, the first:\n%s", len(errs), errs[0])
			}
			require.NotEmpty(t, warn, "the outage is logged")
			require.LessOrEqual(t, len(warn), 5, "one line when the relay starts failing, then a reminder every 700ms at most:\n%s", strings.Join(warn, "\n"))
			require.Contains(t, warn[0], "will keep retrying")
			require.Contains(t, warn[0], "topic=orders")
			require.Contains(t, warn[0], "message_uuid=m0")
			require.Contains(t, warn[0], "broker down")
			require.GreaterOrEqual(t, len(warn), 2, "a reminder while the relay keeps failing:\n%s", strings.Join(warn, "\n"))
			require.Contains(t, warn[1], "failed_attempts=")
			var recovered []string
			for _, l := range info {
				if strings.Contains(l, "relay recovered after") {
					recovered = append(recovered, l)
				}
			}
			require.Len(t, recovered, 1, "one line when the relay recovers:\n%s", strings.Join(info, "\n"))
		})
	}
}

// logLines keeps the lines of a slog.TextHandler.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// at returns the lines at level (DEBUG, INFO, WARN, ERROR).
func (l *logLines) at(level string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, " level="+level+" ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestRelayLoggerHidesOnlyTheRelaysRefusals: the relay's router logs the
// forwarder's error for a message the relay refused (errRefused, wrapped
// by the forwarder) at debug, and every other error at error.
func TestRelayLoggerHidesOnlyTheRelaysRefusals(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	l := relayLogger{logsink.New(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))).Watermill()}.
		With(watermill.LogFields{"handler_name": "events_forwarder"})
	refused := fmt.Errorf("cannot publish a message: %w", errors.Join(fmt.Errorf("%w: %w", errRefused, errors.New("broker down"))))
	l.Error("Handler returned error", refused, nil)
	l.Error("Handler returned error", errors.New("cannot unwrap message from an envelope"), nil)
	require.Len(t, logs.at("DEBUG"), 1)
	require.Contains(t, logs.at("DEBUG")[0], "broker down")
	require.Len(t, logs.at("ERROR"), 1)
	require.Contains(t, logs.at("ERROR")[0], "cannot unwrap")
	require.Contains(t, logs.at("ERROR")[0], "handler_name=events_forwarder")
}

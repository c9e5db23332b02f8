package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// clock is a test clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// calls is the external system of the tests: it counts calls per
// idempotency key.
type calls struct {
	mu   sync.Mutex
	keys []string
}

func (c *calls) record(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, inbox.IdempotencyKey(ctx))
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

type externalSetup struct {
	db       *gorm.DB
	clock    *clock
	counters *metrics.Counters
	logs     *logLines
}

// logLines keeps what a logger wrote, a line each ("LEVEL message").
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// count is how many lines begin with prefix.
func (l *logLines) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

func (s externalSetup) middleware(t *testing.T, policy inbox.Policy, checksum bool) message.HandlerMiddleware {
	t.Helper()
	mw, err := inbox.New(inbox.Config{DB: s.db, Consumer: "payments.charge", Mode: inbox.External,
		OnUnknown: policy, Lease: 30 * time.Second, Now: s.clock.Now, Recorder: s.counters, Checksum: checksum, Logger: slog.New(s.logs)})
	require.NoError(t, err)
	return mw
}

// purge runs cleanup with retention at the test clock's time and returns
// how many inbox keys it deleted.
func (s externalSetup) purge(t *testing.T, retention time.Duration) int64 {
	t.Helper()
	c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: s.db, Now: s.clock.Now, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	res, err := c.Purge(context.Background(), handlers.CleanupStore{Retention: retention})
	require.NoError(t, err)
	return res.Inbox
}

func status(t *testing.T, db *gorm.DB, id string) (string, int) {
	t.Helper()
	var row struct {
		Status   string
		Attempts int
	}
	require.NoError(t, db.Raw("SELECT status, attempts FROM postroom_inbox WHERE message_id = ?", id).Scan(&row).Error)
	return row.Status, row.Attempts
}

func requireUnrecoverable(t *testing.T, err error) {
	t.Helper()
	var u interface{ Unrecoverable() bool }
	require.ErrorAs(t, err, &u)
	require.True(t, u.Unrecoverable())
}

func TestExternalModeConformance(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			setup := func(t *testing.T) externalSetup {
				return externalSetup{db: store.Open(t), clock: newClock(), counters: &metrics.Counters{}, logs: &logLines{}}
			}
			// crashed leaves the claim an attempt whose process died holds:
			// its handler started the call and never returned.
			crashed := func(t *testing.T, s externalSetup, mw message.HandlerMiddleware, id string, api *calls) {
				t.Helper()
				started, dead, gone := make(chan struct{}), make(chan struct{}), make(chan struct{})
				go func() {
					defer close(gone)
					_, _ = mw(func(msg *message.Message) ([]*message.Message, error) {
						api.record(msg.Context())
						close(started)
						<-dead // never returns while the test looks
						return nil, errors.New("the process died here")
					})(message.NewMessage(id, []byte("charge 10 EUR")))
				}()
				<-started
				t.Cleanup(func() { close(dead); <-gone })
			}

			t.Run("the handler runs once with a stable idempotency key, then the key is done", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				h := s.middleware(t, inbox.Park, false)(func(msg *message.Message) ([]*message.Message, error) {
					api.record(msg.Context())
					return nil, nil
				})
				for range 3 {
					_, err := h(message.NewMessage("e-1", nil))
					require.NoError(t, err)
				}
				require.Equal(t, 1, api.count())
				require.Equal(t, idempotency.Key("payments.charge", "", "e-1"), api.keys[0])
				require.Len(t, api.keys[0], 32)
				st, n := status(t, s.db, "e-1")
				require.Equal(t, "done", st)
				require.Equal(t, 1, n)
				require.EqualValues(t, 2, s.counters.Get("payments.charge", metrics.Duplicate))
				var duplicates int
				require.NoError(t, s.db.Raw("SELECT duplicates FROM postroom_inbox WHERE message_id = 'e-1'").Scan(&duplicates).Error)
				require.Equal(t, 2, duplicates)
			})

			t.Run("a copy that finds a live claim waits for it and makes no second call", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				release := make(chan struct{})
				var first atomic.Bool
				h := s.middleware(t, inbox.Park, false)(func(msg *message.Message) ([]*message.Message, error) {
					api.record(msg.Context())
					if first.CompareAndSwap(false, true) {
						<-release // the first consumer is mid-call
					}
					return nil, nil
				})
				errs := make(chan error, 2)
				go func() { _, err := h(message.NewMessage("e-2", nil)); errs <- err }()
				require.Eventually(t, func() bool { return api.count() == 1 }, 5*time.Second, time.Millisecond)
				go func() { _, err := h(message.NewMessage("e-2", nil)); errs <- err }()
				time.Sleep(300 * time.Millisecond) // the second copy looks at the claim meanwhile
				require.Equal(t, 1, api.count())
				close(release)
				require.NoError(t, <-errs)
				require.NoError(t, <-errs)
				require.Equal(t, 1, api.count())
				require.EqualValues(t, 1, s.counters.Get("payments.charge", metrics.Duplicate))
				require.Equal(t, 1, s.logs.count("INFO inbox: another delivery holds this message's claim"), "the wait is said once, not at each look")
				require.Zero(t, s.logs.count("WARN inbox: took over"))
			})

			t.Run("Park: an attempt that died mid-call parks the message and nothing calls again", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Park, false)
				crashed(t, s, mw, "e-3", api)
				s.clock.Advance(31 * time.Second) // the dead attempt's lease runs out
				h := mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })
				for range 2 { // a repeat of the parked message goes to the error topic too
					_, err := h(message.NewMessage("e-3", []byte("charge 10 EUR")))
					require.ErrorIs(t, err, inbox.ErrOutcomeUnknown)
					require.ErrorContains(t, err, "outcome unknown")
					require.ErrorContains(t, err, "then run `postroom inbox resolve payments.charge e-3 --attempts 1 --done` if it did")
					requireUnrecoverable(t, err)
				}
				require.Equal(t, 1, api.count())
				require.EqualValues(t, 1, s.counters.Get("payments.charge", metrics.Parked))

				list, err := claims.ListUnresolved(context.Background(), s.db, "", s.clock.Now(), 10)
				require.NoError(t, err)
				require.Len(t, list, 1)
				require.Equal(t, "parked", list[0].Status)
				require.Equal(t, "e-3", list[0].MessageID)

				// The operator finds the charge was made: the replay is a duplicate.
				require.NoError(t, claims.Resolve(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-3"}, claims.Happened, s.clock.Now()))
				_, err = h(message.NewMessage("e-3", nil))
				require.NoError(t, err)
				require.Equal(t, 1, api.count())
				err = claims.Resolve(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-3"}, claims.Happened, s.clock.Now())
				require.ErrorIs(t, err, claims.ErrNotUnresolved)
			})

			t.Run("the redelivery of a dead attempt, arriving while its lease lives, is not dropped", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Park, false)
				crashed(t, s, mw, "e-11", api)
				errs := make(chan error, 1)
				go func() {
					_, err := mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })(message.NewMessage("e-11", nil))
					errs <- err
				}()
				select {
				case err := <-errs:
					t.Fatalf("the copy was finished while the claim was live (acking it would lose the message): %v", err)
				case <-time.After(300 * time.Millisecond):
				}
				s.clock.Advance(31 * time.Second)
				select {
				case err := <-errs:
					require.ErrorIs(t, err, inbox.ErrOutcomeUnknown)
				case <-time.After(10 * time.Second):
					t.Fatal("the copy still waits after the lease ran out")
				}
				require.Equal(t, 1, api.count())
			})

			t.Run("Park, then released by the operator: the replay calls again", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Park, false)
				crashed(t, s, mw, "e-4", api)
				// A live claim cannot be released: its attempt may still succeed.
				err := claims.Resolve(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-4"}, claims.DidNotHappen, s.clock.Now())
				require.ErrorIs(t, err, claims.ErrNotUnresolved)
				s.clock.Advance(31 * time.Second)
				require.NoError(t, claims.Resolve(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-4"}, claims.DidNotHappen, s.clock.Now()))
				_, err = mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })(message.NewMessage("e-4", nil))
				require.NoError(t, err)
				require.Equal(t, 2, api.count())
				require.Equal(t, api.keys[0], api.keys[1])
				st, n := status(t, s.db, "e-4")
				require.Equal(t, "done", st)
				require.Equal(t, 2, n)
			})

			t.Run("a resolution of the attempt an operator saw does not resolve a later one", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Park, false)
				key := inbox.Key{MessageID: "e-15"}
				crashed(t, s, mw, "e-15", api)
				s.clock.Advance(31 * time.Second)
				list, err := claims.ListUnresolved(context.Background(), s.db, "", s.clock.Now(), 10)
				require.NoError(t, err)
				require.Len(t, list, 1)
				require.Equal(t, 1, list[0].Attempts, "what the stale page shows")
				// Another operator releases it, and the next copy dies mid-call too.
				require.NoError(t, claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", key, 1, claims.DidNotHappen, s.clock.Now()))
				crashed(t, s, mw, "e-15", api)
				s.clock.Advance(31 * time.Second)

				err = claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", key, 1, claims.Happened, s.clock.Now())
				require.ErrorIs(t, err, claims.ErrClaimChanged)
				require.ErrorContains(t, err, "attempt 1 was shown, the claim is at attempt 2, processing")
				st, n := status(t, s.db, "e-15")
				require.Equal(t, "processing", st, "the later attempt stays unresolved")
				require.Equal(t, 2, n)
				err = claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-16"}, 1, claims.Happened, s.clock.Now())
				require.ErrorIs(t, err, claims.ErrNotUnresolved, "no claim at all")
				require.ErrorContains(t, err, "no claim with this key")
				require.ErrorContains(t, claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", key, 0, claims.Happened, s.clock.Now()),
					"attempts start at 1")
				require.NoError(t, claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", key, 2, claims.Happened, s.clock.Now()))
				err = claims.ResolveAttempt(context.Background(), s.db, "", "payments.charge", key, 2, claims.Happened, s.clock.Now())
				require.ErrorIs(t, err, claims.ErrNotUnresolved, "resolved already, at the attempt shown")
				require.ErrorContains(t, err, "the claim is done already: handled, or resolved as done, attempt 2", "what it is, not only what it is not (a cold trial)")
			})

			t.Run("Retry: an attempt that died mid-call is run again with the same idempotency key", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Retry, false)
				crashed(t, s, mw, "e-5", api)
				h := mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })
				s.clock.Advance(31 * time.Second)
				_, err := h(message.NewMessage("e-5", nil))
				require.NoError(t, err)
				require.Equal(t, 2, api.count())
				require.Equal(t, api.keys[0], api.keys[1], "the external system can deduplicate on the key")
				st, n := status(t, s.db, "e-5")
				require.Equal(t, "done", st)
				require.Equal(t, 2, n)
				require.Equal(t, 1, s.logs.count("WARN inbox: took over a claim whose lease ran out"), "the takeover is said")
			})

			t.Run("a resolution starts the key's retention again", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Park, false)
				crashed(t, s, mw, "e-14", api)
				s.clock.Advance(31 * time.Second)
				h := mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })
				_, err := h(message.NewMessage("e-14", nil))
				require.ErrorIs(t, err, inbox.ErrOutcomeUnknown)
				s.clock.Advance(300 * time.Hour) // the operator resolves it long after
				require.NoError(t, claims.Resolve(context.Background(), s.db, "", "payments.charge", inbox.Key{MessageID: "e-14"}, claims.Happened, s.clock.Now()))
				require.Zero(t, s.purge(t, 240*time.Hour), "before: purged at once, so the replay that follows --done called again")
				_, err = h(message.NewMessage("e-14", nil)) // the replay from the error topic
				require.NoError(t, err)
				require.Equal(t, 1, api.count())
			})

			t.Run("a takeover starts the key's retention again", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				mw := s.middleware(t, inbox.Retry, false)
				crashed(t, s, mw, "e-13", api)
				s.clock.Advance(300 * time.Hour) // the copy that takes over comes long after the first
				h := mw(func(msg *message.Message) ([]*message.Message, error) { api.record(msg.Context()); return nil, nil })
				_, err := h(message.NewMessage("e-13", nil))
				require.NoError(t, err)
				require.Zero(t, s.purge(t, 240*time.Hour), "the key of the attempt that took over is within its retention (before: purged, "+
					"so a redelivery of that copy called again)")
				_, err = h(message.NewMessage("e-13", nil))
				require.NoError(t, err)
				require.Equal(t, 2, api.count())
			})

			t.Run("an error that says the effect did not happen releases the claim", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				h := s.middleware(t, inbox.Park, false)(func(msg *message.Message) ([]*message.Message, error) {
					api.record(msg.Context())
					if api.count() == 1 {
						return nil, inbox.NotDone(errors.New("503 from the payment API"))
					}
					return nil, nil
				})
				_, err := h(message.NewMessage("e-6", nil))
				require.ErrorIs(t, err, inbox.ErrNotDone)
				require.ErrorContains(t, err, "503 from the payment API")
				var u interface{ Unrecoverable() bool }
				require.False(t, errors.As(err, &u), "the redelivery retries")
				st, _ := status(t, s.db, "e-6")
				require.Equal(t, "released", st)
				_, err = h(message.NewMessage("e-6", nil)) // no waiting: the claim is released
				require.NoError(t, err)
				require.Equal(t, 2, api.count())
				require.EqualValues(t, 1, s.counters.Get("payments.charge", metrics.Released))
			})

			t.Run("any other error keeps the claim and follows the policy", func(t *testing.T) {
				s := setup(t)
				api := &calls{}
				fail := func(msg *message.Message) ([]*message.Message, error) {
					api.record(msg.Context())
					return nil, errors.New("read timeout")
				}
				_, err := s.middleware(t, inbox.Park, false)(fail)(message.NewMessage("e-7", nil))
				require.ErrorIs(t, err, inbox.ErrOutcomeUnknown)
				require.ErrorContains(t, err, "read timeout")
				requireUnrecoverable(t, err)
				st, _ := status(t, s.db, "e-7")
				require.Equal(t, "parked", st)

				retry := s.middleware(t, inbox.Retry, false)(fail)
				_, err = retry(message.NewMessage("e-8", nil))
				require.ErrorContains(t, err, "read timeout")
				require.NotErrorIs(t, err, inbox.ErrOutcomeUnknown)
				_, err = retry(message.NewMessage("e-8", nil)) // at once: the failed attempt gave up its lease
				require.ErrorContains(t, err, "read timeout")
				st, n := status(t, s.db, "e-8")
				require.Equal(t, "processing", st)
				require.Equal(t, 2, n)
				require.Equal(t, 3, api.count())
			})

			t.Run("a panic under Park parks the message", func(t *testing.T) {
				s := setup(t)
				h := s.middleware(t, inbox.Park, false)(func(*message.Message) ([]*message.Message, error) { panic("nil map") })
				require.Panics(t, func() { _, _ = h(message.NewMessage("e-9", nil)) })
				_, err := h(message.NewMessage("e-9", nil))
				require.ErrorIs(t, err, inbox.ErrOutcomeUnknown)
			})

			t.Run("database writes commit with the done mark; a lost claim writes nothing", func(t *testing.T) {
				s := setup(t)
				effects(t, s.db)
				mw := s.middleware(t, inbox.Retry, false)
				proceed := make(chan struct{})
				slowDone := make(chan error, 1)
				var attempt atomic.Int32
				h := mw(func(msg *message.Message) ([]*message.Message, error) {
					if attempt.Add(1) == 1 {
						<-proceed // outlives its lease
					}
					return writeEffect(msg)
				})
				go func() { _, err := h(message.NewMessage("e-10", nil)); slowDone <- err }()
				require.Eventually(t, func() bool { return attempt.Load() == 1 }, 5*time.Second, time.Millisecond)
				s.clock.Advance(31 * time.Second)
				_, err := h(message.NewMessage("e-10", nil)) // takes over and completes
				require.NoError(t, err)
				close(proceed)
				require.NoError(t, <-slowDone)
				require.EqualValues(t, 1, countEffects(t, s.db, "e-10"))
			})

			t.Run("a message a middleware inside skips (a stale update) is done", func(t *testing.T) {
				s := setup(t)
				skip := func(h message.HandlerFunc) message.HandlerFunc {
					return func(msg *message.Message) ([]*message.Message, error) {
						unitofwork.RollbackOnly(msg.Context())
						return nil, nil
					}
				}
				_, err := s.middleware(t, inbox.Park, false)(skip(nil))(message.NewMessage("e-12", nil))
				require.NoError(t, err)
				st, _ := status(t, s.db, "e-12")
				require.Equal(t, "done", st, "not left processing, to be parked as unknown later")
			})

			t.Run("a reused message ID with another payload is refused with both checksums", func(t *testing.T) {
				s := setup(t)
				for _, mode := range []inbox.Mode{inbox.Transactional, inbox.External} {
					mw, err := inbox.New(inbox.Config{DB: s.db, Consumer: "log", Mode: mode, Checksum: true, Now: s.clock.Now, Recorder: s.counters})
					require.NoError(t, err)
					h := mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })
					id := "r-" + string(rune('0'+mode))
					_, err = h(message.NewMessage(id, []byte(`{"amount":10}`)))
					require.NoError(t, err)
					_, err = h(message.NewMessage(id, []byte(`{"amount":10}`)))
					require.NoError(t, err, "same content: a duplicate")
					_, err = h(message.NewMessage(id, []byte(`{"amount":99}`)))
					require.ErrorIs(t, err, inbox.ErrIDReused)
					require.ErrorContains(t, err, "stored checksum a8b88b82fe90a16048eb8851fe382405395cd395dafaa7ca9be90ec00f82a72b, this message 2166059e526b50f65c44d4c4ce2a08b79bab73530cbe45ea35763397295c5239") // SHA-256 of both payloads
					requireUnrecoverable(t, err)
				}
				require.EqualValues(t, 2, s.counters.Get("log", metrics.Reused))
				require.EqualValues(t, 2, s.counters.Get("log", metrics.Duplicate))
			})

			t.Run("StorePayload keeps the payload with the key", func(t *testing.T) {
				s := setup(t)
				mw, err := inbox.New(inbox.Config{DB: s.db, Consumer: "log", StorePayload: true})
				require.NoError(t, err)
				_, err = mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage("p-1", []byte("ISA*00*...")))
				require.NoError(t, err)
				var payload []byte
				require.NoError(t, s.db.Raw("SELECT payload FROM postroom_inbox WHERE message_id = 'p-1'").Row().Scan(&payload))
				require.Equal(t, "ISA*00*...", string(payload))
			})
		})
	}
}

// TestOutcomeUnknownSaysTheCommandToRun: the reason of a parked message
// holds the resolve command with its consumer, message ID, source and
// attempt (cmd/postroom TestTheParkedReasonsCommandRuns parses it).
func TestOutcomeUnknownSaysTheCommandToRun(t *testing.T) {
	t.Parallel()
	err := &inbox.OutcomeUnknownError{Consumer: "payments/payments.ChargeCard", Key: inbox.Key{Source: "checkout", MessageID: "3f0c"}, Attempts: 2}
	require.Contains(t, err.Error(), "then run `postroom inbox resolve payments/payments.ChargeCard 3f0c --source checkout --attempts 2 --done` if it did, "+
		"or the same with --release instead of --done if it did not")
}

func TestExternalModeRefusesAnOuterUnitOfWork(t *testing.T) {
	db := testenv.SQLite(t)
	mw, err := inbox.New(inbox.Config{DB: db, Consumer: "c", Mode: inbox.External})
	require.NoError(t, err)
	uow, err := unitofwork.New(unitofwork.Config{DB: db})
	require.NoError(t, err)
	msg := message.NewMessage("x", nil)
	_, err = uow(mw(func(*message.Message) ([]*message.Message, error) { return nil, nil }))(msg)
	require.ErrorIs(t, err, inbox.ErrInsideUnitOfWork)
}

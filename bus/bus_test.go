package bus_test

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
	"github.com/glebarez/sqlite"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
	wsql "github.com/postroom/postroom/transport/sql"
)

type CreateInvoice struct {
	OrderID string
	Amount  int
}

func (CreateInvoice) MessageName() string { return "billing.CreateInvoice" }

type OrderPlaced struct{ OrderID string }

func (OrderPlaced) MessageName() string { return "sales.OrderPlaced" }

type CustomerMoved struct{ Street string }

func (CustomerMoved) MessageName() string { return "crm.CustomerMoved" }

type ChargeCard struct{ Amount int }

func (ChargeCard) MessageName() string { return "payments.ChargeCard" }

// setup is one transport with the database its handlers write to.
type setup struct {
	name string
	open func(t *testing.T) (*gorm.DB, func() transport.Transport)
}

var setups = []setup{
	{"gochannel+sqlite", func(t *testing.T) (*gorm.DB, func() transport.Transport) {
		tr := gochannel.New(gochannel.Config{})
		return testenv.SQLite(t), func() transport.Transport { return tr }
	}},
	{"sql+postgres", sqlSetup(testenv.Postgres)},
	{"sql+mariadb", sqlSetup(testenv.MySQL)},
	{"amqp+postgres", func(t *testing.T) (*gorm.DB, func() transport.Transport) {
		url := testenv.RequireAMQP(t)
		return testenv.Postgres(t), func() transport.Transport {
			tr, err := amqp.New(amqp.Config{URL: url})
			require.NoError(t, err)
			amqptest.Cleanup(t, tr)
			return tr
		}
	}},
}

// sqlSetup is the SQL transport on the database open returns.
func sqlSetup(open func(testing.TB) *gorm.DB) func(t *testing.T) (*gorm.DB, func() transport.Transport) {
	return func(t *testing.T) (*gorm.DB, func() transport.Transport) {
		db := open(t)
		return db, func() transport.Transport {
			tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			return tr
		}
	}
}

// endpoint is a running bus and what reached its error topic.
type endpoint struct {
	*bus.Bus
	errors chan *message.Message
}

// start runs b and collects its error topic.
func start(t *testing.T, b *bus.Bus, errorTopic string) *endpoint {
	t.Helper()
	errSub, err := b.Transport().Subscriber(testenv.Name("errors_"), 1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errs, err := errSub.Subscribe(ctx, errorTopic)
	require.NoError(t, err)
	ep := &endpoint{Bus: b, errors: make(chan *message.Message, 16)}
	go func() {
		for msg := range errs {
			msg.Ack()
			ep.errors <- msg
		}
	}()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case <-b.Running():
	case <-time.After(20 * time.Second):
		t.Fatal("bus did not start")
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		_ = b.Close()
	})
	return ep
}

func newBus(t *testing.T, s setup, db *gorm.DB, tr transport.Transport, errorTopic string) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Config{
		Endpoint:        testenv.Name("ep"),
		Transport:       tr,
		DB:              db,
		ErrorTopic:      errorTopic,
		Retry:           bus.RetryPolicy{MaxRetries: 2, InitialBackoff: 5 * time.Millisecond},
		Logger:          testenv.Logger(t),
		MaxPayloadBytes: 64 << 10,
	})
	require.NoError(t, err)
	return b
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBusScenarios(t *testing.T) {
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			db, newTransport := s.open(t)
			errorTopic := testenv.Name("error_")
			b := newBus(t, s, db, newTransport(), errorTopic)

			var received sync.Map
			require.NoError(t, bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
				received.Store(m.OrderID, m)
				return unitofwork.Tx(ctx).Exec("INSERT INTO invoices (order_id, amount) VALUES (?, ?)", m.OrderID, m.Amount).Error
			}, bus.WithInbox()))
			require.NoError(t, db.Exec("CREATE TABLE invoices (order_id VARCHAR(100) NOT NULL, amount INTEGER NOT NULL)").Error)

			var panics, unrecoverable atomic.Int32
			require.NoError(t, bus.Handle(b, func(ctx context.Context, m *OrderPlaced) error {
				switch m.OrderID {
				case "panic":
					panics.Add(1)
					panic("customer record missing")
				case "unrecoverable":
					unrecoverable.Add(1)
					return bus.Unrecoverable(errors.New("customer c-9 does not exist"))
				}
				return nil
			}))
			var moved, charged atomic.Int32
			require.NoError(t, bus.Handle(b, func(context.Context, *CustomerMoved) error { moved.Add(1); return nil }, bus.WithStale()))
			require.NoError(t, bus.Handle(b, func(context.Context, *ChargeCard) error { charged.Add(1); return nil },
				bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{}})))
			ep := start(t, b, errorTopic)
			ctx := context.Background()

			t.Run("a command is handled once, with its identity in metadata", func(t *testing.T) {
				id := uuid.Must(uuid.NewV7()).String()
				for range 3 { // the same logical message sent three times
					require.NoError(t, bus.Send(ctx, ep.Bus, &CreateInvoice{OrderID: "o-1", Amount: 42}, bus.WithMessageID(id)))
				}
				waitFor(t, "duplicates", func() bool { return ep.Counters().Total(metrics.Duplicate) == 2 })
				var n int64
				require.NoError(t, db.Raw("SELECT COUNT(*) FROM invoices WHERE order_id = 'o-1'").Scan(&n).Error)
				require.EqualValues(t, 1, n)
				require.EqualValues(t, 1, ep.Counters().Get("billing.CreateInvoice", metrics.Handled))
			})

			t.Run("an error marked bus.Unrecoverable goes to the error topic without retries", func(t *testing.T) {
				require.NoError(t, bus.Publish(ctx, ep.Bus, &OrderPlaced{OrderID: "unrecoverable"}))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "customer c-9 does not exist")
				require.Equal(t, 1, bus.ErrorAttempts(failed))
				require.EqualValues(t, 1, unrecoverable.Load())
				require.NoError(t, bus.Unrecoverable(nil))
				require.True(t, bus.IsUnrecoverable(bus.Unrecoverable(context.Canceled)))
				require.ErrorIs(t, bus.Unrecoverable(context.Canceled), context.Canceled)
			})

			t.Run("a panicking handler ends in the error topic and the bus keeps running", func(t *testing.T) {
				require.NoError(t, bus.Publish(ctx, ep.Bus, &OrderPlaced{OrderID: "panic"}))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "customer record missing")
				require.Equal(t, "sales.OrderPlaced", failed.Metadata.Get(metadata.ErrorHandler))
				require.Equal(t, 3, bus.ErrorAttempts(failed))
				require.EqualValues(t, 3, panics.Load())
				require.Equal(t, "sales.OrderPlaced", failed.Metadata.Get(metadata.MessageType))
				require.Equal(t, ep.Endpoint(), failed.Metadata.Get(metadata.SourceEndpoint))
				id, err := uuid.Parse(failed.UUID)
				require.NoError(t, err)
				require.EqualValues(t, 7, id.Version(), "message IDs are UUIDv7")

				require.NoError(t, bus.Send(ctx, ep.Bus, &CreateInvoice{OrderID: "o-2", Amount: 1}))
				waitFor(t, "the next message", func() bool { _, ok := received.Load("o-2"); return ok })
			})

			t.Run("a malformed payload goes to the error topic without retries", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte("{not json"))
				msg.Metadata.Set(metadata.MessageType, "sales.OrderPlaced")
				require.NoError(t, ep.Transport().Publisher().Publish("sales.OrderPlaced", msg))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "malformed sales.OrderPlaced payload")
				require.Equal(t, 1, bus.ErrorAttempts(failed))
			})

			t.Run("a payload that is JSON null goes to the error topic without retries", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte(" null\n"))
				msg.Metadata.Set(metadata.MessageType, "sales.OrderPlaced")
				require.NoError(t, ep.Transport().Publisher().Publish("sales.OrderPlaced", msg))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "malformed sales.OrderPlaced payload: the payload is JSON null")
				require.Equal(t, 1, bus.ErrorAttempts(failed))
				require.ErrorContains(t, bus.Publish[OrderPlaced](ctx, ep.Bus, nil), "bus: publish sales.OrderPlaced: the event is a nil pointer")
				require.ErrorContains(t, bus.Send[CreateInvoice](ctx, ep.Bus, nil), "the command is a nil pointer")
				require.ErrorContains(t, bus.Publish(ctx, ep.Bus, &nullPayload{}), "the payload is JSON null")
			})

			t.Run("a foreign update without postroom-message-type is applied by a WithStale handler", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte(`{"Street":"1 Main St"}`))
				msg.Metadata.Set(metadata.EntityID, "customer-1")
				msg.Metadata.Set(metadata.Version, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
				require.NoError(t, ep.Transport().Publisher().Publish("crm.CustomerMoved", msg))
				// Not to the error topic with "message type is missing":
				// docs/foreign-producers.md says the key is optional.
				waitFor(t, "the update applied", func() bool { return moved.Load() == 1 })
			})

			t.Run("bad type metadata for an inbox handler goes to the error topic at once, before the key", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte(`{"OrderID":"o-8"}`))
				msg.Metadata.Set(metadata.MessageType, strings.Repeat("t", 300))
				require.NoError(t, ep.Transport().Publisher().Publish("billing.CreateInvoice", msg))
				failed := <-ep.errors
				// Not retried with the database's reason (PostgreSQL: "value
				// too long for type character varying(255)").
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "unknown message type")
				require.Equal(t, 1, bus.ErrorAttempts(failed))
				var keys int64
				require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox WHERE message_id = ?", msg.UUID).Scan(&keys).Error)
				require.Zero(t, keys, "refused before the inbox wrote a key")
			})

			t.Run("a malformed payload for an external-effects handler is not parked as outcome unknown", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte("{not json"))
				msg.Metadata.Set(metadata.MessageType, "payments.ChargeCard")
				require.NoError(t, ep.Transport().Publisher().Publish("payments.ChargeCard", msg))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "malformed payments.ChargeCard payload")
				require.NotContains(t, failed.Metadata.Get(metadata.ErrorReason), "outcome unknown")
				var keys int64
				require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox WHERE message_id = ?", msg.UUID).Scan(&keys).Error)
				require.Zero(t, keys, "the handler never ran: no claim to resolve")
				require.Zero(t, charged.Load())
			})

			t.Run("an unknown message type goes to the error topic", func(t *testing.T) {
				msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
				msg.Metadata.Set(metadata.MessageType, "sales.OrderCancelled")
				require.NoError(t, ep.Transport().Publisher().Publish("sales.OrderPlaced", msg))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), `unknown message type "sales.OrderCancelled"`)
				require.Equal(t, 1, bus.ErrorAttempts(failed))
			})

			t.Run("a payload over the limit goes to the error topic", func(t *testing.T) {
				big := []byte(`{"OrderID":"` + strings.Repeat("x", 100<<10) + `"}`)
				msg := message.NewMessage(uuid.NewString(), big)
				msg.Metadata.Set(metadata.MessageType, "sales.OrderPlaced")
				require.NoError(t, ep.Transport().Publisher().Publish("sales.OrderPlaced", msg))
				failed := <-ep.errors
				require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "over the limit of 65536")
				require.Equal(t, len(big), len(failed.Payload), "the payload is kept for a replay")
			})

			if !strings.HasPrefix(s.name, "sql+") { // watermill-sql stores metadata as JSON, which makes it valid UTF-8
				t.Run("metadata that is not UTF-8 goes to the error topic", func(t *testing.T) {
					msg := message.NewMessage(uuid.NewString(), []byte(`{"OrderID":"o-9"}`))
					msg.Metadata.Set(metadata.MessageType, "sales.OrderPlaced")
					msg.Metadata.Set("x-customer", "M\xfcller")
					require.NoError(t, ep.Transport().Publisher().Publish("sales.OrderPlaced", msg))
					failed := <-ep.errors
					require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), `metadata "x-customer" is not valid UTF-8`)
				})
			}

			t.Run("a message without an ID goes to the error topic", func(t *testing.T) {
				msg := message.NewMessage("", []byte(`{"OrderID":"o-3"}`))
				msg.Metadata.Set(metadata.MessageType, "billing.CreateInvoice")
				require.NoError(t, ep.Transport().Publisher().Publish("billing.CreateInvoice", msg))
				failed := <-ep.errors
				// The bus says it, or the transport that read no ID (RabbitMQ).
				require.Regexp(t, `message ID is empty|message has no ID`, failed.Metadata.Get(metadata.ErrorReason))
				_, handled := received.Load("o-3")
				require.False(t, handled)
			})
		})
	}
}

// TestConfigMigrateRunsInRun: New does no I/O; Config.Migrate applies the
// migrations when Run starts, with Run's context.
func TestConfigMigrateRunsInRun(t *testing.T) {
	db, err := store.Open(testenv.SQLiteDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close(db) })
	b, err := bus.New(bus.Config{Endpoint: "migrating", DB: db, Migrate: true, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.False(t, db.Migrator().HasTable("postroom_inbox"), "New migrated nothing")
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithInbox()))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.Run(cancelled), context.Canceled, "the migration runs with Run's context")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	require.True(t, db.Migrator().HasTable("postroom_inbox"))
	stop()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
}

// TestCloseAfterAFailedRun: Close after a Run that failed before the
// router started returns at once, without the router's close timeout.
func TestCloseAfterAFailedRun(t *testing.T) {
	db, err := store.Open(testenv.SQLiteDSN(t)) // not migrated: Run fails
	require.NoError(t, err)
	t.Cleanup(func() { store.Close(db) })
	b, err := bus.New(bus.Config{Endpoint: "failing", DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithInbox()))
	require.ErrorContains(t, b.Run(context.Background()), "postroom migrate")
	began := time.Now()
	require.NoError(t, b.Close())
	require.Less(t, time.Since(began), 5*time.Second, "Close did not wait for a router that never ran")
	require.ErrorContains(t, b.Run(context.Background()), "after Close")
}

// TestDelayedRetriesNeedTheirTable: delayed retries without a database, or
// on one without the delayed table, are refused, not skipped in silence.
func TestDelayedRetriesNeedTheirTable(t *testing.T) {
	_, err := bus.New(bus.Config{Endpoint: "nodb", DelayedRetries: bus.DelayedRetries{Delays: bus.DelayedRetriesDefault()}})
	require.ErrorContains(t, err, "needs Config.DB")
	b, err := bus.New(bus.Config{Endpoint: "nodb", Logger: testenv.Logger(t)})
	require.NoError(t, err)
	err = bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithDelayedRetries(time.Second))
	require.ErrorContains(t, err, "needs Config.DB")

	db, err := store.Open(testenv.SQLiteDSN(t)) // not migrated
	require.NoError(t, err)
	t.Cleanup(func() { store.Close(db) })
	b, err = bus.New(bus.Config{Endpoint: "unmigrated", DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithDelayedRetries(time.Second)))
	require.ErrorContains(t, b.Run(context.Background()), "no delayed table")
	require.NoError(t, b.Close())
}

// TestDeliveryLimitAboveMaxDeliveries: a quorum queue's delivery limit at
// or near Config.MaxDeliveries would let RabbitMQ drop a failing message
// before the bus moves it to the error topic (a limit of 2 drops a message
// after two restarts, without a trace), so New refuses it; the defaults
// (20 and 10) pass.
func TestDeliveryLimitAboveMaxDeliveries(t *testing.T) {
	quorum := func(limit int) *amqp.Transport {
		tr, err := amqp.New(amqp.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", QueueType: amqp.QueueQuorum, DeliveryLimit: limit})
		require.NoError(t, err)
		return tr
	}
	_, err := bus.New(bus.Config{Endpoint: "billing", Transport: quorum(2)})
	require.ErrorContains(t, err, "the transport's delivery limit 2 is not above Config.MaxDeliveries 10 by 5")
	_, err = bus.New(bus.Config{Endpoint: "billing", Transport: quorum(14)})
	require.ErrorContains(t, err, "raise the limit (amqp.Config.DeliveryLimit) to 15 or more")
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: quorum(6), MaxDeliveries: 1, Logger: testenv.Logger(t)})
	require.NoError(t, err, "a lower MaxDeliveries fits under the limit")
	require.NoError(t, b.Close())
	b, err = bus.New(bus.Config{Endpoint: "billing", Transport: quorum(0), Logger: testenv.Logger(t)})
	require.NoError(t, err, "the defaults fit")
	require.NoError(t, b.Close())
}

// nullPayload marshals to JSON null, as a nil slice type would.
type nullPayload struct{}

func (nullPayload) MessageName() string          { return "test.NullPayload" }
func (nullPayload) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// TestANilTxPanicNamesTheMissingOption: a handler registered without a
// transaction that writes through unitofwork.Tx(ctx) (nil there) panics; the
// message reaches the error topic with a reason that names the options
// that give it one, not only Go's "invalid memory address or nil pointer
// dereference". A handler with a transaction keeps Go's reason as it is.
func TestANilTxPanicNamesTheMissingOption(t *testing.T) {
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db,
		Logger: testenv.Logger(t), Retry: bus.RetryPolicy{NoRetries: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, c *CreateInvoice) error {
		return unitofwork.Tx(ctx).Exec("SELECT 1").Error
	}))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, o *OrderPlaced) error {
		var nilMap map[string]*int
		return unitofwork.Tx(ctx).Exec("SELECT ?", *nilMap["none"]).Error
	}, bus.WithTransaction()))
	ep := start(t, b, "error")
	require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{}))
	failed := <-ep.errors
	require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "nil pointer dereference (if from unitofwork.Tx(ctx): it is nil in a handler registered without WithTransaction, WithInbox, WithStale or WithBatch)")
	require.NoError(t, bus.Publish(context.Background(), b, &OrderPlaced{}))
	failed = <-ep.errors
	require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "nil pointer dereference")
	require.NotContains(t, failed.Metadata.Get(metadata.ErrorReason), "unitofwork.Tx(ctx)", "a handler with a transaction: Go's reason alone")
}

// TestWithVersionIsCheckedAtSend: a version every receiver's stale check
// would refuse (no entity ID, a zero time) fails at Send and Publish, not
// at the receivers.
func TestWithVersionIsCheckedAtSend(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), Logger: testenv.Logger(t)})
	require.NoError(t, err)
	ctx := context.Background()
	require.ErrorContains(t, bus.Publish(ctx, b, &OrderPlaced{}, bus.WithVersion("", time.Now())), "WithVersion: stale: bad version: entity ID is missing")
	require.ErrorContains(t, bus.Publish(ctx, b, &OrderPlaced{}, bus.WithVersion("order-1", time.Time{})), "WithVersion: stale: bad version: version \"0001-01-01T00:00:00Z\" is out of range")
	require.ErrorIs(t, bus.Send(ctx, b, &CreateInvoice{}, bus.WithVersion("", time.Now())), stale.ErrBadVersion)
}

// TestASQLiteDBNotOpenedByStoreOpenIsSaid: a SQLite *gorm.DB opened with
// gorm and the driver alone keeps a transaction open after its COMMIT
// failed (store.Open's pool rolls it back), so the bus says at Run that it
// lacks the fix; one from store.Open is not warned about.
func TestASQLiteDBNotOpenedByStoreOpenIsSaid(t *testing.T) {
	dsn := testenv.SQLiteDSN(t)
	for _, tc := range []struct {
		name   string
		open   func() (*gorm.DB, error)
		warned bool
	}{
		{"store.Open", func() (*gorm.DB, error) { return store.Open(dsn) }, false},
		{"gorm and the driver", func() (*gorm.DB, error) {
			return gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: gormlogger.Discard})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := tc.open()
			require.NoError(t, err)
			t.Cleanup(func() { store.Close(db) })
			said := warnedAtRun(t, bus.Config{Endpoint: "sqlite", DB: db, Migrate: true})
			require.Equal(t, tc.warned, strings.Contains(said, "was not opened by store.Open"), said)
		})
	}
}

// TestANegativeRedeliveryWindowIsRefused: a negative window shortened the
// horizon the inbox retention is checked against, so a retention of 1 ms
// passed and keys were purged before their redeliveries came (a cold
// trial).
func TestANegativeRedeliveryWindowIsRefused(t *testing.T) {
	_, err := bus.New(bus.Config{Endpoint: "negative", RedeliveryWindow: -time.Hour})
	require.ErrorContains(t, err, "Config.RedeliveryWindow -1h0m0s is negative")
}

// TestNegativeSettingsAreRefused: negative settings that mean nothing are
// refused by New and Handle. Accepted, a negative DelayedPollInterval or
// GaugeInterval makes Run panic (a ticker of a negative interval), a
// negative MaxPayloadBytes sends every message to the error topic, a
// negative Cleanup.Interval fails Run naming a scheduler field, a negative
// delayed retry delay schedules retries in the past, WithConcurrency(0) is
// quietly 1, WithBatch(0, 0) quietly no batch, and a nil handler function
// panics at every delivery.
func TestNegativeSettingsAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  bus.Config
		says string
	}{
		"DelayedPollInterval": {bus.Config{DelayedPollInterval: -time.Second}, "Config.DelayedPollInterval -1s is negative"},
		"GaugeInterval":       {bus.Config{Metrics: bus.Metrics{GaugeInterval: -time.Second}}, "Config.Metrics.GaugeInterval -1s is negative"},
		"InboxRetention":      {bus.Config{InboxRetention: -time.Hour}, "Config.InboxRetention -1h0m0s is negative"},
		"RateLimit.MaxWait":   {bus.Config{RateLimit: bus.RateLimit{MaxWait: -time.Second}}, "Config.RateLimit.MaxWait -1s is negative"},
		"Cleanup.Interval":    {bus.Config{Cleanup: bus.CleanupSchedule{Interval: -time.Hour}}, "Config.Cleanup.Interval -1h0m0s is negative"},
		"MaxPayloadBytes":     {bus.Config{MaxPayloadBytes: -5}, "Config.MaxPayloadBytes -5 is negative"},
		"Cleanup.BatchSize":   {bus.Config{Cleanup: bus.CleanupSchedule{BatchSize: -3}}, "Config.Cleanup.BatchSize -3 is negative"},
		"DelayedRetries":      {bus.Config{DelayedRetries: bus.DelayedRetries{Delays: []time.Duration{time.Second, -time.Second}}}, "Config.DelayedRetries: delay -1s is negative"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Endpoint = "negative"
			_, err := bus.New(tc.cfg)
			require.ErrorContains(t, err, tc.says)
		})
	}

	b, err := bus.New(bus.Config{Endpoint: "negative", DB: testenv.SQLite(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	ok := func(context.Context, *OrderPlaced) error { return nil }
	for opt, says := range map[string]struct {
		o    bus.HandlerOption
		says string
	}{
		"WithConcurrency(0)":      {bus.WithConcurrency(0), "WithConcurrency 0: must be at least 1"},
		"WithConcurrency(-2)":     {bus.WithConcurrency(-2), "WithConcurrency -2: must be at least 1"},
		"WithBatch(0, 0)":         {bus.WithBatch(0, 0), "WithBatch size 0: must be 1 to 1000"},
		"WithDelayedRetries(-1s)": {bus.WithDelayedRetries(-time.Second), "WithDelayedRetries delay -1s is negative"},
	} {
		require.ErrorContains(t, bus.Handle(b, ok, says.o), says.says, opt)
	}
	require.ErrorContains(t, bus.Handle[OrderPlaced](b, nil), "must not be nil")
	require.ErrorContains(t, bus.Handle(nil, ok), "must not be nil")
	require.ErrorContains(t, bus.HandleBatch[OrderPlaced](b, nil), "must not be nil")
	require.NoError(t, bus.Handle(b, ok, bus.WithConcurrency(2)), "a failed Handle leaves the name free")
}

// warnedAtRun runs a bus of cfg with an inbox handler, stops it once it
// runs, and returns what it logged at warn and above.
func warnedAtRun(t *testing.T, cfg bus.Config) string {
	t.Helper()
	logger, logs := testenv.CapturedLogger(slog.LevelWarn)
	cfg.Logger = logger
	b, err := bus.New(cfg)
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.WithInbox()))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	stop()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
	return logs.String()
}

// TestAPanicIsLoggedWithItsHandler: two handlers of one event get the same
// message ID, so the panic's line names the handler; without it, only the
// stack tells which one panicked.
func TestAPanicIsLoggedWithItsHandler(t *testing.T) {
	logger, logs := testenv.CapturedLogger(slog.LevelError)
	b, err := bus.New(bus.Config{Endpoint: "panics", Logger: logger, Retry: bus.RetryPolicy{NoRetries: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { panic("boom") }, bus.Named("loyalty")))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Running()
	require.NoError(t, bus.Publish(ctx, b, &OrderPlaced{OrderID: "o-1"}))
	waitFor(t, "the failure", func() bool { return b.Counters().Total(metrics.Failed) == 1 })
	stop()
	require.NoError(t, <-done)
	require.NoError(t, b.Close())
	require.Regexp(t, `msg="bus: handler panicked" handler=loyalty message_id=`, logs.String())
}

// TestRunSaysWhatItRunsOn: Run logs at info, once, the endpoint, the store
// and the transport it runs on, so that a service that fell back to the
// embedded defaults (SQLite, the in-memory transport) says so.
func TestRunSaysWhatItRunsOn(t *testing.T) {
	records := make(chan slog.Record, 100)
	b, err := bus.New(bus.Config{Endpoint: "billing", DB: testenv.SQLite(t), Migrate: true,
		Logger: slog.New(recordsTo(records)), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, bus.Handle(b, func(context.Context, *ConfCmd) error { return nil }))
	run(t, b)
	for {
		select {
		case r := <-records:
			if r.Message != "bus: running" {
				continue
			}
			require.Equal(t, slog.LevelInfo, r.Level)
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			require.Equal(t, map[string]string{"endpoint": "billing", "store": "sqlite", "transport": "in this process", "handlers": "1"}, attrs)
			return
		case <-time.After(20 * time.Second):
			t.Fatal("Run logged no 'bus: running' line")
		}
	}
}

// recordsTo is a slog handler that sends each record to records, or drops
// it when records is full.
type recordsTo chan slog.Record

func (h recordsTo) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsTo) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Clone():
	default:
	}
	return nil
}
func (h recordsTo) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordsTo) WithGroup(string) slog.Handler      { return h }

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/wire"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
	wsql "github.com/postroom/postroom/transport/sql"
)

// The conformance suite: every guarantee of docs/guarantees.md that the bus
// gives, checked once, on every store × transport the bus supports. A new
// store or transport joins by adding one row to confStores or
// confTransports; a combination it cannot support is declared there with
// the reason, never skipped. docs/guarantees.md shows the matrix.

type confStore struct {
	name   string
	open   func(testing.TB) *gorm.DB
	outbox bool // watermill-sql has an adapter for it
}

var confStores = []confStore{
	{"sqlite", testenv.SQLite, false},
	{"postgres", testenv.Postgres, true},
	{"mariadb", testenv.MySQL, true},
}

type confTransport struct {
	name string
	open func(t *testing.T, db *gorm.DB) transport.Transport
	// sharedTopics: the transport's instances share their topics (one
	// broker), so checks on it cannot run beside each other: an event one
	// check publishes would reach another's subscribers. The others' run
	// in parallel (an in-memory instance per check, a database per check
	// for the SQL transport).
	sharedTopics bool
	// unsupported names the stores this transport cannot run on, and why.
	unsupported map[string]string
}

var confTransports = []confTransport{
	{name: "gochannel", open: func(*testing.T, *gorm.DB) transport.Transport { return gochannel.New(gochannel.Config{}) }},
	{name: "sql", open: func(t *testing.T, db *gorm.DB) transport.Transport {
		tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		return tr
	}, unsupported: map[string]string{"sqlite": "the SQL transport keeps messages in watermill-sql's tables, which have no SQLite adapter"}},
	{name: "amqp", open: func(t *testing.T, _ *gorm.DB) transport.Transport {
		tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(t)})
		require.NoError(t, err)
		amqptest.Cleanup(t, tr)
		return tr
	}, sharedTopics: true},
}

// confCase is one store × transport, for one check.
type confCase struct {
	store     confStore
	transport confTransport
	db        *gorm.DB
	tr        transport.Transport // shared by every bus of the check
	effects   string              // the business table
	// errorTopic is the error topic of the check's buses.
	errorTopic string
}

type confCheck struct {
	name   string
	outbox bool // needs a store with an outbox
	run    func(t *testing.T, c *confCase)
	// unsupported names the transports the check cannot run on, and why.
	unsupported map[string]string
}

var confChecks = []confCheck{
	{"the inbox applies a message once under 8 concurrent copies", false, checkConcurrentCopies, nil},
	{"a failure, then a panic, then the redelivery is applied once", false, checkFailureLeavesNoTrace, nil},
	{"one ID from two sources is applied for each", false, checkTwoSources, nil},
	{"handlers of one event, two named alike but for case, each apply it once", false, checkTwoHandlers, nil},
	{"two endpoints on one database, named alike but for case, each apply it once", false, checkTwoEndpoints, nil},
	{"stale updates converge whatever the order, IDs differing only in case and spaces", false, checkStaleConvergence, nil},
	{"IDs of 37 to 200 bytes travel and are applied once; 201 is refused at Send", false, checkLongIDs, nil},
	{"CleanupStore fires and purges the inbox", false, checkCleanupPurges, nil},
	{"IDs of 37 to 200 bytes travel through the outbox", true, checkLongIDsThroughOutbox, nil},
	{"CleanupStore purges relayed outbox rows", true, checkCleanupPurgesOutbox, nil},
	{"the outbox relays everything behind a poison message", true, checkOutboxPoison, nil},
	{"two services sharing the database and the transport with the outbox: each gets every event, nothing said at error", true, checkOutboxSharedQuiet, nil},
	{"two services on one database whose transports do not reach each other: the relay says so at error", true, checkOutboxOtherReachSaid, nil},
	{"a message nacked in a loop goes to the error topic after MaxDeliveries", false, checkPoisonLoop, nil},
	{"an event nobody subscribes to is not an error, and is counted as unrouted", false, checkUnroutedEvent,
		map[string]string{"sql": "the SQL transport's topics are logs every group reads: it cannot tell that nobody reads one"}},
	{"a delayed message is delivered once at or after its time, and not when its handler fails", false, checkDelayed, nil},
	{"delayed messages arrive in due order, each within 5 s of its time", false, checkDelayedOrder, nil},
	{"delayed retries bring a failing message back to its handler alone, then the error topic", false, checkDelayedRetries, nil},
	{"a delayed retry whose runs ended their process goes to the error topic after MaxDeliveries", false, checkDelayedRetryThatEndsItsProcess, nil},
	{"a delayed retry goes through Config.Middleware and keeps the message's trace", false, checkDelayedRetryKeepsTrace, nil},
	{"a command sent before its endpoint first runs waits for it", false, checkCommandBeforeEndpoint,
		map[string]string{"gochannel": "a command to an endpoint with no queue fails at Send (transport.ErrNoRoute)",
			"amqp": "a command to an endpoint with no queue fails at Send (transport.ErrNoRoute)"}},
	{"a batch with a failing message commits the others once and retries it alone", false, checkBatchFailingMessage, noBatches},
	{"a batch of duplicates of each other and of a handled message applies each once", false, checkBatchDuplicates, noBatches},
	{"stale updates in one batch: the newest applied, last, older ones skipped", false, checkBatchStale, noBatches},
	{"a batch handler's failing call is retried message by message; only the failing one again", false, checkHandleBatchFailing, noBatches},
	{"a batch handler sees each message once, duplicates in and across batches skipped", false, checkHandleBatchDuplicates, nil},
	{"a batch handler's poison messages go to the error topic, the others are applied once", false, checkHandleBatchPoison, noBatches},
	{"a batch handler's copy of a key whose first message fails is handled, not skipped", false, checkHandleBatchCopyOfFailed, noBatches},
	{"a batch handler's statement error it swallowed fails its message alone", false, checkHandleBatchSwallowedError, noBatches},
	{"keys a handler's external-effects claims left: released handled, parked and held to the error topic", false, checkLeftoverClaims, nil},
	{"bad input from a foreign producer goes to the error topic at once, before any key, watermark or claim", false, checkBadInput, nil},
	{"a stop lets the message in flight finish within StopTimeout; past it, it goes back to the broker", false, checkStopDrains, nil},
	{"a batch handler's call cut short by a stop while its sends are refused gives every message back", false, checkHandleBatchSendsOnStop, nil},
	{"a command the outbox relays to an endpoint with no queue goes to the error topic", true, checkOutboxCommandNoRoute,
		map[string]string{"sql": "the SQL transport's topics are logs every group reads: it cannot tell that no endpoint reads one"}},
}

// noBatches declares where batched commits cannot form batches.
var noBatches = map[string]string{"sql": "the SQL transport hands out one message of a group at a time (transport.Capabilities.Sequential): a batched handler commits each message alone there, checked by TestBatchOnASequentialTransport"}

func TestConformance(t *testing.T) {
	var combos []confRun
	for _, s := range confStores {
		for _, tr := range confTransports {
			combos = append(combos, confRun{serial: tr.sharedTopics, run: func() {
				t.Run(s.name+"+"+tr.name, func(t *testing.T) {
					if why, ok := tr.unsupported[s.name]; ok {
						t.Logf("unsupported, declared: %s", why)
						return
					}
					for _, check := range confChecks {
						t.Run(check.name, func(t *testing.T) { runConfCheck(t, s, tr, check) })
					}
				})
			}})
		}
	}
	concurrently(combos)
}

// runConfCheck runs one check on a new case of store s and transport tr.
func runConfCheck(t *testing.T, s confStore, tr confTransport, check confCheck) {
	if check.outbox && !s.outbox {
		t.Logf("unsupported, declared: %s has no outbox (watermill-sql has no SQLite adapter); messages are sent after commit", s.name)
		return
	}
	if why, ok := check.unsupported[tr.name]; ok {
		t.Logf("unsupported, declared: %s", why)
		return
	}
	db := s.open(t)
	c := &confCase{store: s, transport: tr, db: db, tr: tr.open(t, db), effects: testenv.Name("effects_"), errorTopic: testenv.Name("error_")}
	t.Cleanup(func() { require.NoError(t, c.tr.Close()) }) // after the check's buses: a bus leaves a transport it was given open
	require.NoError(t, db.Exec("CREATE TABLE "+c.effects+" (consumer VARCHAR(200) NOT NULL, id VARCHAR(250) NOT NULL, entity VARCHAR(200) NOT NULL DEFAULT '')").Error)
	check.run(t, c)
}

// confRun is one combination's run (it calls t.Run); serial: its
// transport's instances share topics (confTransport.sharedTopics).
type confRun struct {
	run    func()
	serial bool
}

// concurrently runs the combinations at once, but the serial ones one
// after another. The checks mostly wait (for deliveries, polls, stops),
// not compute: run one after another they took 213 s of the package's
// 482 s, on two cores with -race.
func concurrently(runs []confRun) {
	var wg sync.WaitGroup
	var serial []func()
	for _, r := range runs {
		if r.serial {
			serial = append(serial, r.run)
		} else {
			wg.Go(r.run)
		}
	}
	wg.Go(func() {
		for _, run := range serial {
			run()
		}
	})
	wg.Wait()
}

type ConfCmd struct{ N int }

func (ConfCmd) MessageName() string { return "conf.Cmd" }

type ConfRelayed struct{ From string }

func (ConfRelayed) MessageName() string { return "conf.Relayed" }

type ConfChanged struct{ Entity string }

func (ConfChanged) MessageName() string { return "conf.Changed" }

// newConfBus returns a bus of a new endpoint on the case's database and
// transport; mod adjusts its Config.
func newConfBus(t *testing.T, c *confCase, mod func(*bus.Config)) *bus.Bus {
	t.Helper()
	cfg := bus.Config{
		Endpoint:   testenv.Name("conf"),
		ErrorTopic: c.errorTopic,
		Transport:  c.tr,
		DB:         c.db,
		Retry:      bus.RetryPolicy{MaxRetries: 3, InitialBackoff: 5 * time.Millisecond},
		Logger:     testenv.Logger(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := bus.New(cfg)
	require.NoError(t, err)
	return b
}

// run starts b and stops it when the test ends.
func run(t *testing.T, b *bus.Bus) { testbus.Run(t, b) }

// record is a handler that writes its consumer and the message ID to the
// effects table through the message's transaction.
func record[T any](c *confCase, consumer string) bus.HandlerFunc[T] {
	return func(ctx context.Context, _ *T) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO "+c.effects+" (consumer, id) VALUES (?, ?)", consumer, bus.MessageID(ctx)).Error
	}
}

// effects counts the rows per consumer and ID, compared byte for byte in Go.
func effects(t *testing.T, c *confCase) map[string]int {
	t.Helper()
	var rows []struct{ Consumer, ID string }
	require.NoError(t, c.db.Raw("SELECT consumer, id FROM "+c.effects).Scan(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.Consumer+" "+r.ID]++
	}
	return out
}

// settled waits until handler has settled n deliveries (handled,
// duplicate, stale or failed).
func settled(t *testing.T, b *bus.Bus, handler string, n uint64) {
	t.Helper()
	c := b.Counters()
	waitFor(t, fmt.Sprintf("%d deliveries of %s to settle", n, handler), func() bool {
		return c.Get(handler, metrics.Handled)+c.Get(handler, metrics.Duplicate)+c.Get(handler, metrics.Stale)+c.Get(handler, metrics.Failed) >= n
	})
}

func checkConcurrentCopies(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox(), bus.WithConcurrency(8)))
	run(t, b)
	id := testenv.Name("copy-")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id))) })
	}
	wg.Wait()
	settled(t, b, "conf.Cmd", 8)
	require.Equal(t, map[string]int{"cmd " + id: 1}, effects(t, c))
	require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.EqualValues(t, 7, b.Counters().Get("conf.Cmd", metrics.Duplicate))
}

func checkFailureLeavesNoTrace(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	var attempts atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		if err := record[ConfCmd](c, "cmd")(ctx, m); err != nil {
			return err
		}
		switch attempts.Add(1) {
		case 1:
			return errors.New("first attempt fails after its write")
		case 2:
			panic("second attempt panics after its write")
		}
		return nil
	}, bus.WithInbox()))
	run(t, b)
	id := testenv.Name("fail-")
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
	settled(t, b, "conf.Cmd", 1)
	require.Equal(t, map[string]int{"cmd " + id: 1}, effects(t, c), "the failed attempts left nothing, the third applied once")
	require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Handled))
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
	settled(t, b, "conf.Cmd", 2)
	require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Duplicate), "the redelivery after success is a duplicate")
	require.Equal(t, map[string]int{"cmd " + id: 1}, effects(t, c))
}

func checkTwoSources(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox()))
	run(t, b)
	id := testenv.Name("src-")
	for _, source := range []string{"sender-a", "sender-b", "sender-a"} {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id), bus.WithMetadata(metadata.SourceEndpoint, source)))
	}
	settled(t, b, "conf.Cmd", 3)
	require.Equal(t, map[string]int{"cmd " + id: 2}, effects(t, c), "once per source")
	require.EqualValues(t, 1, b.Counters().Get("conf.Cmd", metrics.Duplicate))
}

func checkTwoHandlers(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	names := []string{"a", "b", "B"} // names alike but for case are two handlers (on MariaDB's SQL transport, taken as one, each would get half)
	for _, name := range names {
		require.NoError(t, bus.Handle(b, record[ConfChanged](c, name), bus.Named(name), bus.WithInbox(), bus.WithStale()))
	}
	run(t, b)
	at := time.Now().Add(-time.Minute)
	entity := testenv.Name("e-")
	first, older := testenv.Name("m-"), testenv.Name("m-")
	require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{}, bus.WithMessageID(first), bus.WithVersion(entity, at)))
	require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{}, bus.WithMessageID(older), bus.WithVersion(entity, at.Add(-time.Second))))
	require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{}, bus.WithMessageID(first), bus.WithVersion(entity, at)))
	for _, name := range names {
		settled(t, b, name, 3)
		require.EqualValues(t, 1, b.Counters().Get(name, metrics.Handled), name)
		require.EqualValues(t, 1, b.Counters().Get(name, metrics.Stale), name)
		require.EqualValues(t, 1, b.Counters().Get(name, metrics.Duplicate), name)
	}
	require.Equal(t, map[string]int{"a " + first: 1, "b " + first: 1, "B " + first: 1}, effects(t, c))
}

func checkTwoEndpoints(t *testing.T, c *confCase) {
	var buses []*bus.Bus
	name := testenv.Name("conf")
	for _, endpoint := range []string{name, strings.ToUpper(name)} { // alike but for case: two endpoints
		b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Endpoint = endpoint })
		require.NoError(t, bus.Handle(b, record[ConfChanged](c, b.Endpoint()), bus.WithInbox(), bus.WithStale()))
		buses = append(buses, b)
	}
	for _, b := range buses {
		run(t, b)
	}
	entity, id := testenv.Name("e-"), testenv.Name("m-")
	for range 2 {
		require.NoError(t, bus.Publish(context.Background(), buses[0], &ConfChanged{}, bus.WithMessageID(id), bus.WithVersion(entity, time.Now())))
	}
	want := map[string]int{}
	for _, b := range buses {
		settled(t, b, "conf.Changed", 2)
		require.EqualValues(t, 1, b.Counters().Get("conf.Changed", metrics.Handled), b.Endpoint())
		want[b.Endpoint()+" "+id] = 1
	}
	require.Equal(t, want, effects(t, c))
}

// checkStaleConvergence sends, in shuffled orders, updates of one entity at
// one timestamp whose IDs differ only in case or a trailing space, with
// older ones among them: every ID is a distinct message, none is applied
// after a greater one, and the last applied is the greatest (the version,
// then the ID's bytes).
func checkStaleConvergence(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	var mu sync.Mutex
	applied := map[string][]string{} // entity → IDs in the order applied
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfChanged) error {
		mu.Lock()
		applied[m.Entity] = append(applied[m.Entity], bus.MessageID(ctx))
		mu.Unlock()
		return nil
	}, bus.WithInbox(), bus.WithStale()))
	run(t, b)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	tied := []string{"Order-7f3a", "order-7F3A", "order-7f3a", "order-7f3a "}
	const rounds = 3
	for round := range rounds {
		entity := fmt.Sprintf("entity-%d-%s", round, testenv.Name(""))
		type update struct {
			id string
			at time.Time
		}
		var updates []update
		for _, id := range tied {
			updates = append(updates, update{fmt.Sprintf("%s-%d", id[:5], round) + id[5:], at})
		}
		updates = append(updates, update{fmt.Sprintf("older-1-%d", round), at.Add(-time.Second)}, update{fmt.Sprintf("older-2-%d", round), at.Add(-2 * time.Second)})
		rand.Shuffle(len(updates), func(i, j int) { updates[i], updates[j] = updates[j], updates[i] })
		for _, u := range updates {
			require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{Entity: entity}, bus.WithMessageID(u.id), bus.WithVersion(entity, u.at)))
		}
		settled(t, b, "conf.Changed", uint64(len(updates)*(round+1)))
		mu.Lock()
		got := applied[entity]
		mu.Unlock()
		ids := make([]string, 0, len(tied))
		for _, u := range updates {
			if u.at.Equal(at) {
				ids = append(ids, u.id)
			}
		}
		sort.Strings(ids) // bytes
		greatest := ids[len(ids)-1]
		require.NotEmpty(t, got)
		require.Equal(t, greatest, got[len(got)-1], "the greatest (version, ID) is applied last; order sent: %v", updates)
		for i := 1; i < len(got); i++ {
			require.False(t, olderOrEqual(got[i], got[i-1]), "%q applied after %q", got[i], got[i-1])
		}
	}
	require.EqualValues(t, 0, b.Counters().Get("conf.Changed", metrics.Duplicate), "IDs that differ only in case or spaces are distinct messages")
}

// olderOrEqual compares two IDs of the convergence check: the "older-"
// ones have earlier versions; among the tied ones the bytes decide.
func olderOrEqual(a, b string) bool {
	rank := func(id string) (int, string) {
		switch {
		case strings.HasPrefix(id, "older-2"):
			return 0, id
		case strings.HasPrefix(id, "older-1"):
			return 1, id
		}
		return 2, id
	}
	ra, ia := rank(a)
	rb, ib := rank(b)
	return ra < rb || (ra == rb && ia <= ib)
}

func longID(n int) string {
	head := testenv.Name("id-") + "-"
	return head + strings.Repeat("x", n-len(head))
}

func checkLongIDs(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox()))
	run(t, b)
	want := map[string]int{}
	for _, n := range []int{37, 64, 150, 200} {
		id := longID(n)
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
		want["cmd "+id] = 1
	}
	settled(t, b, "conf.Cmd", 8)
	require.Equal(t, want, effects(t, c))
	require.EqualValues(t, 4, b.Counters().Get("conf.Cmd", metrics.Duplicate))
	err := bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(longID(201)))
	require.ErrorIs(t, err, bus.ErrBadMessageID)
	require.ErrorContains(t, err, "200")
}

// shortRetention lets cleanup purge what a check wrote a few seconds ago:
// no retries and a tiny redelivery window make a 2 s retention valid.
func shortRetention(cfg *bus.Config) {
	cfg.Retry = bus.RetryPolicy{NoRetries: true}
	cfg.RedeliveryWindow = time.Millisecond
	cfg.InboxRetention = 2 * time.Second
	cfg.Cleanup.Interval = time.Second
	cfg.Metrics.TableGaugeInterval = -1
}

func count(t *testing.T, db *gorm.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Raw(query, args...).Scan(&n).Error)
	return n
}

func checkCleanupPurges(t *testing.T, c *confCase) {
	b := newConfBus(t, c, shortRetention)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox()))
	run(t, b)
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	settled(t, b, "conf.Cmd", 1)
	consumer := b.Endpoint() + "/conf.Cmd"
	require.EqualValues(t, 1, count(t, c.db, "SELECT COUNT(*) FROM postroom_inbox WHERE consumer = ?", consumer))
	// A key inside the retention must stay.
	recent := time.Now().Add(time.Hour).UTC().Format("2006-01-02 15:04:05.000000")
	require.NoError(t, c.db.Exec("INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at) VALUES (?, 's', 'recent', 'conf.Cmd', ?)",
		consumer, recent).Error)
	waitFor(t, "cleanup to purge the inbox key", func() bool {
		return count(t, c.db, "SELECT COUNT(*) FROM postroom_inbox WHERE consumer = ?", consumer) == 1
	})
	require.EqualValues(t, 1, count(t, c.db, "SELECT COUNT(*) FROM postroom_inbox WHERE consumer = ? AND message_id = 'recent'", consumer))
	// Counted once the handler has returned, a moment after its commit.
	waitFor(t, "the cleanup counted as handled", func() bool { return b.Counters().Get("postroom.CleanupStore", metrics.Handled) > 0 })
}

func checkLongIDsThroughOutbox(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Outbox = true })
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		return bus.Send(ctx, b, &ConfRelayed{}, bus.WithMessageID(longID(m.N)))
	}, bus.WithInbox()))
	require.NoError(t, bus.Handle(b, record[ConfRelayed](c, "relayed"), bus.WithInbox()))
	run(t, b)
	for _, n := range []int{37, 64, 150, 200} {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: n}))
	}
	settled(t, b, "conf.Relayed", 4)
	got := effects(t, c)
	require.Len(t, got, 4)
	for k, n := range got {
		require.Equal(t, 1, n, k)
	}
}

func checkCleanupPurgesOutbox(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { shortRetention(cfg); cfg.Outbox = true })
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		return bus.Send(ctx, b, &ConfRelayed{})
	}, bus.WithInbox()))
	require.NoError(t, bus.Handle(b, record[ConfRelayed](c, "relayed"), bus.WithInbox()))
	run(t, b)
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	settled(t, b, "conf.Relayed", 1)
	outbox := "watermill_postroom_outbox"
	if c.store.name == "postgres" {
		outbox = `"watermill_postroom_outbox"`
	}
	// Each cleanup slot is itself sent through the outbox: wait for the
	// rows written up to now, the relayed message among them.
	offset := "`offset`"
	if c.store.name == "postgres" {
		offset = `"offset"`
	}
	written := count(t, c.db, "SELECT MAX("+offset+") FROM "+outbox)
	require.Positive(t, written)
	waitFor(t, "cleanup to purge the relayed outbox rows", func() bool {
		return count(t, c.db, "SELECT COUNT(*) FROM "+outbox+" WHERE "+offset+" <= ?", written) == 0
	})
}

// refusing is a transport whose broker refuses the messages marked
// "conf-poison" (on any topic but the error topic).
type refusing struct {
	transport.Transport
	errorTopic string
}

func (r refusing) Publisher() message.Publisher {
	return refusingPublisher{r.Transport.Publisher(), r.errorTopic}
}

type refusingPublisher struct {
	message.Publisher
	errorTopic string
}

func (p refusingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get("conf-poison") != "" && topic != p.errorTopic {
			return errors.New("broker: message refused")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

func checkOutboxPoison(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Outbox = true; cfg.Transport = refusing{c.tr, c.errorTopic} })
	errs := errorQueue(t, c)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		if err := bus.Send(ctx, b, &ConfRelayed{From: "poison"}, bus.WithMetadata("conf-poison", "yes")); err != nil {
			return err
		}
		for range 3 {
			if err := bus.Send(ctx, b, &ConfRelayed{}); err != nil {
				return err
			}
		}
		return nil
	}, bus.WithInbox()))
	require.NoError(t, bus.Handle(b, record[ConfRelayed](c, "relayed"), bus.WithInbox()))
	run(t, b)
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	settled(t, b, "conf.Relayed", 3)
	require.Len(t, effects(t, c), 3, "the three behind the poison message were relayed")
	select {
	case failed := <-errs:
		failed.Ack()
		require.Equal(t, "yes", failed.Metadata.Get("conf-poison"))
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "outbox relay")
	case <-time.After(20 * time.Second):
		t.Fatal("the poison message did not reach the error topic")
	}
	waitFor(t, "the move counted", func() bool { return b.Counters().Get("postroom.outbox-relay", metrics.Failed) == 1 })
}

// TestConformanceSendRightAfterRun sends a command (and, once, publishes
// an event) right after `go b.Run(ctx)`, as the README does, on a new bus
// each time: a handler's queues exist from Handle, so nothing is lost on
// any transport; and a new handler gets only what was sent after it was
// registered (each handler counts exactly the messages of its round: a
// new SQL transport group that reads an event topic's whole history fails
// it). The store is the first each transport supports.
//
// That a handler gets nothing older is checked behind a marker event (in
// the second round, the first bus that could get the first round's event,
// and in the last): the marker is read after any older event of its
// topic, so once it is handled an extra old event has been counted. Only
// waiting for the count misses an old event that comes after it: a
// mutation starting every SQL group at the topic's first row would then
// fail the check only when the old event happened to come first and the
// wait timed out.
func TestConformanceSendRightAfterRun(t *testing.T) {
	var runs []confRun
	for _, tr := range confTransports {
		runs = append(runs, confRun{serial: tr.sharedTopics, run: func() { t.Run(tr.name, func(t *testing.T) { sendRightAfterRun(t, tr) }) }})
	}
	concurrently(runs)
}

// sendRightAfterRun is TestConformanceSendRightAfterRun on one transport.
func sendRightAfterRun(t *testing.T, tr confTransport) {
	var store confStore
	for _, s := range confStores {
		if _, no := tr.unsupported[s.name]; !no {
			store = s
			break
		}
	}
	db := store.open(t)
	shared := tr.open(t, db)
	t.Cleanup(func() { require.NoError(t, shared.Close()) })
	c := &confCase{store: store, transport: tr, db: db, tr: shared, errorTopic: testenv.Name("error_")}
	for i := range sendAfterRunRounds {
		b := newConfBus(t, c, nil)
		var got atomic.Int32
		var marked atomic.Bool
		marker := fmt.Sprint("marker-", i)
		require.NoError(t, bus.Handle(b, func(context.Context, *ConfCmd) error { got.Add(1); return nil }))
		require.NoError(t, bus.Handle(b, func(_ context.Context, m *ConfChanged) error {
			if m.Entity == marker {
				marked.Store(true)
			} else {
				got.Add(1)
			}
			return nil
		}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		require.NoError(t, bus.Send(ctx, b, &ConfCmd{N: i}))
		want := int32(1)
		if i == 0 {
			// Once: on RabbitMQ every earlier bus's durable queue
			// would keep a copy of each event.
			require.NoError(t, bus.Publish(ctx, b, &ConfChanged{}))
			want++
		}
		waitFor(t, fmt.Sprintf("round %d: every message handled", i), func() bool { return got.Load() == want })
		<-b.Running() // stop a started router (stopping one mid-start is not what this checks)
		if i == 1 || i == sendAfterRunRounds-1 {
			// Only in two rounds: on RabbitMQ the durable queue of every
			// earlier bus keeps a copy of each event.
			require.NoError(t, bus.Publish(ctx, b, &ConfChanged{Entity: marker}))
			waitFor(t, fmt.Sprintf("round %d: the marker handled", i), marked.Load)
			require.Equal(t, want, got.Load(), "round %d: a new handler got only the messages of its round", i)
		}
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, b.Close())
	}
}

// sendAfterRunRounds is how many buses each transport starts: the race it
// looks for (a send before the router subscribed) lost messages in about
// one run in three before queues were declared at Handle.
const sendAfterRunRounds = 200

func checkOutboxCommandNoRoute(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Outbox = true })
	errs := errorQueue(t, c)
	nowhere := testenv.Name("nowhere")
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		return bus.Send(ctx, b, &ConfRelayed{}, bus.To(nowhere))
	}, bus.WithInbox()))
	run(t, b)
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	select {
	case failed := <-errs:
		failed.Ack()
		require.Equal(t, nowhere, failed.Metadata.Get(wire.CommandTo))
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "outbox relay")
	case <-time.After(20 * time.Second):
		t.Fatal("the command to an endpoint with no queue did not reach the error topic")
	}
	err := bus.Send(context.Background(), b, &ConfRelayed{}, bus.To(nowhere))
	require.ErrorIs(t, err, transport.ErrNoRoute, "outside a handler Send fails at once")
	require.ErrorContains(t, err, nowhere)
}

// errorQueue declares a queue on the case's error topic now, so that it
// keeps what fails from here on, and delivers it once the test reads.
func errorQueue(t *testing.T, c *confCase) <-chan *message.Message {
	t.Helper()
	sub, err := c.tr.Subscriber(testenv.Name("errors_"), 1)
	require.NoError(t, err)
	if init, ok := sub.(message.SubscribeInitializer); ok {
		require.NoError(t, init.SubscribeInitialize(c.errorTopic))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errs, err := sub.Subscribe(ctx, c.errorTopic)
	require.NoError(t, err)
	return errs
}

// checkPoisonLoop: a message whose every delivery ends in a nack (here a
// Middleware fails it, outside the bus's retries) is delivered
// MaxDeliveries times, then moved to the error topic with the reason; the
// messages behind it are handled.
func checkPoisonLoop(t *testing.T, c *confCase) {
	const maxDeliveries = 3
	var poisonDeliveries atomic.Int32
	var mu sync.Mutex
	var counted []int64 // the poison message's count in the database at each redelivery counted there
	nackPoison := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if msg.Metadata.Get("conf-poison") != "" {
				poisonDeliveries.Add(1)
				if msg.Metadata.Get(metadata.Redelivered) != "" {
					var n int64
					require.NoError(t, c.db.Raw("SELECT deliveries FROM postroom_deliveries WHERE message_id = ?", msg.UUID).Row().Scan(&n))
					mu.Lock()
					counted = append(counted, n)
					mu.Unlock()
				}
				return nil, errors.New("middleware: refused")
			}
			return h(msg)
		}
	}
	b := newConfBus(t, c, func(cfg *bus.Config) {
		cfg.MaxDeliveries = maxDeliveries
		cfg.Middleware = []message.HandlerMiddleware{nackPoison}
	})
	errs := errorQueue(t, c)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox()))
	run(t, b)
	poison := testenv.Name("poison-")
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(poison), bus.WithMetadata("conf-poison", "yes")))
	for range 3 {
		require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}))
	}
	select {
	case failed := <-errs:
		failed.Ack()
		require.Equal(t, poison, failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), fmt.Sprintf("delivered %d times without being handled", maxDeliveries))
	case <-time.After(30 * time.Second):
		t.Fatal("the message nacked in a loop did not reach the error topic")
	}
	settled(t, b, "conf.Cmd", 4)
	require.Len(t, effects(t, c), 3, "the messages behind the poison message were handled")
	require.EqualValues(t, maxDeliveries, poisonDeliveries.Load(), "delivered MaxDeliveries times, then moved")
	if c.transport.name == "amqp" { // classic queues: the broker says redelivered, and counts nothing
		mu.Lock()
		require.Equal(t, []int64{1, 2}, counted, "each redelivery counted in the database before it is handled, so that a crash counts too")
		mu.Unlock()
	}
	countsLeft(t, c, poison)
}

// countsLeft waits until the deliveries table holds no count of the
// message id, which was moved aside: the count is forgotten right after
// the move, so a reader of the error topic may see the message first.
func countsLeft(t *testing.T, c *confCase, id string) {
	t.Helper()
	waitFor(t, "the count of a message moved aside forgotten", func() bool {
		var left int64
		require.NoError(t, c.db.Raw("SELECT COUNT(*) FROM postroom_deliveries WHERE message_id = ?", id).Row().Scan(&left))
		return left == 0
	})
}

type ConfUnheard struct{}

func (ConfUnheard) MessageName() string { return "conf.Unheard" }

func checkUnroutedEvent(t *testing.T, c *confCase) {
	b := newConfBus(t, c, nil)
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd")))
	run(t, b)
	require.NoError(t, bus.Publish(context.Background(), b, &ConfUnheard{}), "an event nobody subscribes to is not an error")
	require.EqualValues(t, 1, b.Counters().Get("conf.Unheard", metrics.Unrouted))
	err := bus.Send(context.Background(), b, &ConfUnheard{}, bus.To(testenv.Name("nowhere")))
	require.ErrorIs(t, err, transport.ErrNoRoute, "a command no queue takes is")
	require.EqualValues(t, 1, b.Counters().Get("conf.Unheard", metrics.Unrouted), "and it is not counted as an unrouted event")
}

func checkDelayed(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.DelayedPollInterval = 50 * time.Millisecond })
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfRelayed) error {
		mu.Lock()
		arrived[bus.MessageID(ctx)] = time.Now()
		mu.Unlock()
		return record[ConfRelayed](c, "relayed")(ctx, m)
	}, bus.WithInbox()))
	prefix := testenv.Name("d-")
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		id := fmt.Sprintf("%s-handler-%d", prefix, m.N)
		if err := bus.Send(ctx, b, &ConfRelayed{}, bus.WithMessageID(id), bus.DeliverAfter(300*time.Millisecond)); err != nil {
			return err
		}
		if m.N == 1 {
			return bus.Unrecoverable(errors.New("the handler fails after sending"))
		}
		return nil
	}, bus.WithInbox()))
	run(t, b)
	sent := time.Now()
	ctx := context.Background()
	require.NoError(t, bus.Send(ctx, b, &ConfRelayed{}, bus.WithMessageID(prefix+"-later"), bus.DeliverAfter(500*time.Millisecond)))
	require.NoError(t, bus.Send(ctx, b, &ConfRelayed{}, bus.WithMessageID(prefix+"-past"), bus.DeliverAt(sent.Add(-time.Hour))))
	require.NoError(t, bus.Send(ctx, b, &ConfCmd{N: 0}))
	require.NoError(t, bus.Send(ctx, b, &ConfCmd{N: 1}))
	settled(t, b, "conf.Relayed", 3)
	time.Sleep(time.Second) // room for a wrong delivery
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, arrived, 3, "the one sent by the failed handler never came: %v", arrived)
	require.False(t, arrived[prefix+"-later"].Before(sent.Add(500*time.Millisecond)), "not before its time")
	require.Contains(t, arrived, prefix+"-handler-0")
	require.Contains(t, arrived, prefix+"-past")
	for id, n := range effects(t, c) {
		require.Equal(t, 1, n, id)
	}
	require.Zero(t, count(t, c.db, "SELECT COUNT(*) FROM postroom_delayed WHERE message_id LIKE ?", prefix+"%"), "delivered messages leave the table")
	waitFor(t, "the delayed gauge", func() bool {
		v, ok := b.Counters().GetGauge(metrics.Gauge(metricseries.DelayedMessages))
		return ok && v == 0
	})
}

func checkDelayedRetries(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) {
		cfg.DelayedPollInterval = 50 * time.Millisecond
		cfg.Retry = bus.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Millisecond}
		cfg.DelayedRetries = bus.DelayedRetries{Delays: []time.Duration{time.Hour}} // handler a overrides it
	})
	errs := errorQueue(t, c)
	var mu sync.Mutex
	attempts := map[string]int{}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfChanged) error {
		mu.Lock()
		attempts[bus.MessageID(ctx)]++
		n := attempts[bus.MessageID(ctx)]
		mu.Unlock()
		if m.Entity == "never" || n < 5 {
			return fmt.Errorf("attempt %d fails", n)
		}
		return record[ConfChanged](c, "a")(ctx, m)
	}, bus.Named("a"), bus.WithInbox(), bus.WithDelayedRetries(200*time.Millisecond, 200*time.Millisecond)))
	// A second handler of the event succeeds at once: a delayed retry of
	// "a" must not come to it again.
	require.NoError(t, bus.Handle(b, record[ConfChanged](c, "b"), bus.Named("b"), bus.WithInbox()))
	run(t, b)
	later, never := testenv.Name("later-"), testenv.Name("never-")
	require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{}, bus.WithMessageID(later)))
	require.NoError(t, bus.Publish(context.Background(), b, &ConfChanged{Entity: "never"}, bus.WithMessageID(never)))
	select {
	case failed := <-errs:
		failed.Ack()
		require.Equal(t, never, failed.UUID)
		require.Equal(t, "2", failed.Metadata.Get(metadata.DelayedRetries))
		require.Equal(t, 2, bus.ErrorAttempts(failed), "the immediate attempts of the last delayed retry")
	case <-time.After(30 * time.Second):
		t.Fatal("the message that always fails did not reach the error topic after its delayed retries")
	}
	waitFor(t, "the message that succeeds on its second delayed retry", func() bool { return effects(t, c)["a "+later] == 1 })
	time.Sleep(300 * time.Millisecond) // room for a wrong extra delivery
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 5, attempts[later], "2 immediate attempts, then 2 and 1 in the delayed retries")
	require.Equal(t, 6, attempts[never])
	require.Equal(t, map[string]int{"a " + later: 1, "b " + later: 1, "b " + never: 1}, effects(t, c), "handler b got each once")
}

// checkDelayedRetryThatEndsItsProcess: a delayed retry runs from the
// database under a lease; one whose run ends its process (out of memory,
// a SIGKILL) runs again when the lease ends. Each run is counted in the
// deliveries table before it, so after MaxDeliveries such runs the next
// goes to the error topic instead of the handler. The runs that ended
// their process are the count a database holds after them (two runs,
// seeded here: a lease lasts a minute or more, a test with real kills
// would take minutes).
func checkDelayedRetryThatEndsItsProcess(t *testing.T, c *confCase) {
	endpoint := testenv.Name("dl")
	b := newConfBus(t, c, func(cfg *bus.Config) {
		cfg.Endpoint = endpoint
		cfg.DelayedPollInterval = 50 * time.Millisecond
		cfg.Retry = bus.RetryPolicy{NoRetries: true}
		cfg.MaxDeliveries = 2
	})
	errs := errorQueue(t, c)
	var runs atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
		runs.Add(1)
		return errors.New("fails, then its delayed retries end their process")
	}, bus.Named("a"), bus.WithInbox(), bus.WithDelayedRetries(time.Second)))
	run(t, b)
	id := testenv.Name("crash-")
	require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{}, bus.WithMessageID(id)))
	waitFor(t, "the first delivery", func() bool { return runs.Load() == 1 })
	// On the SQL transport the first delivery was a process's first read,
	// counted, and its count is forgotten once it settled (a delayed retry
	// scheduled): seeded before that, the seed went with it.
	countsLeft(t, c, id)
	d, err := dialects.Of(c.db)
	require.NoError(t, err)
	st, err := d.Deliveries(dialect.DeliveriesTableDefault)
	require.NoError(t, err)
	for range 2 { // two runs of the delayed retry that ended their process
		require.NoError(t, c.db.Exec(st.Count, endpoint+"/a", id, d.Time(time.Now())).Error)
	}
	select {
	case failed := <-errs:
		failed.Ack()
		require.Equal(t, id, failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "delivered 2 times without being handled")
	case <-time.After(30 * time.Second):
		t.Fatal("the delayed retry whose runs ended their process did not reach the error topic")
	}
	require.EqualValues(t, 1, runs.Load(), "the third run went to the error topic, not to the handler")
	countsLeft(t, c, id)
}

// checkCommandBeforeEndpoint: on a transport that cannot refuse a command to
// an endpoint that never ran, the command waits for the endpoint (a new
// group of a command topic starts at its first message).
func checkCommandBeforeEndpoint(t *testing.T, c *confCase) {
	sender := newConfBus(t, c, nil)
	receiver := testenv.Name("later")
	id := testenv.Name("early-")
	require.NoError(t, bus.Send(context.Background(), sender, &ConfCmd{}, bus.To(receiver), bus.WithMessageID(id)))
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.Endpoint = receiver })
	require.NoError(t, bus.Handle(b, record[ConfCmd](c, "cmd"), bus.WithInbox()))
	run(t, b)
	settled(t, b, "conf.Cmd", 1)
	require.Equal(t, map[string]int{"cmd " + id: 1}, effects(t, c))
}

// delayedTolerance is how late a delayed message may arrive: a poll
// interval and a broker hop, with room for a loaded machine.
const delayedTolerance = 5 * time.Second

func checkDelayedOrder(t *testing.T, c *confCase) {
	b := newConfBus(t, c, func(cfg *bus.Config) { cfg.DelayedPollInterval = 50 * time.Millisecond })
	var mu sync.Mutex
	var order []string
	arrived := map[string]time.Time{}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *ConfRelayed) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, bus.MessageID(ctx))
		arrived[bus.MessageID(ctx)] = time.Now()
		return nil
	}))
	run(t, b)
	prefix := testenv.Name("o-")
	start := time.Now().Add(500 * time.Millisecond)
	due := map[string]time.Time{}
	var want []string
	for i := range 4 {
		id := fmt.Sprintf("%s-%d", prefix, i)
		due[id] = start.Add(time.Duration(i) * 400 * time.Millisecond)
		want = append(want, id)
	}
	for i := 3; i >= 0; i-- { // sent in the reverse of their order
		id := want[i]
		require.NoError(t, bus.Send(context.Background(), b, &ConfRelayed{}, bus.WithMessageID(id), bus.DeliverAt(due[id])))
	}
	settled(t, b, "conf.Relayed", 4)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, order, "in the order of their due times")
	for id, at := range arrived {
		require.False(t, at.Before(due[id]), "%s not before its time", id)
		require.Less(t, at.Sub(due[id]), delayedTolerance, "%s within the tolerance", id)
	}
}

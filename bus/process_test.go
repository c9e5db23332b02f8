package bus_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	wsql "github.com/postroom/postroom/transport/sql"
)

// consumer is one consumer process.
type consumer struct {
	cmd   *exec.Cmd
	lines chan string
}

func startConsumer(t *testing.T, dsn, url, endpoint string, crashAt int) *consumer {
	t.Helper()
	return startChild(t, "consumer", dsn, url, endpoint, crashAt)
}

// childCmd is the command of a child process of mode; env adds variables
// (NAME=value).
func childCmd(mode, dsn, url, endpoint string, crashAt int, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDSN+"="+dsn, childAMQP+"="+url,
		childEP+"="+endpoint, fmt.Sprintf("%s=%d", childCrashAt, crashAt))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// startChild starts a child process of mode and waits until it is ready;
// env adds variables (NAME=value).
func startChild(t *testing.T, mode, dsn, url, endpoint string, crashAt int, env ...string) *consumer {
	t.Helper()
	cmd := childCmd(mode, dsn, url, endpoint, crashAt, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &consumer{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case line := <-c.lines:
		require.Equal(t, "ready", line)
	case <-time.After(30 * time.Second):
		t.Fatal("consumer process did not start")
	}
	return c
}

// stop sends SIGTERM and returns the process's counters line.
func (c *consumer) stop(t *testing.T) (handled, duplicates int) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	for line := range c.lines {
		if strings.HasPrefix(line, "counters ") {
			_, err := fmt.Sscanf(line, "counters handled=%d duplicates=%d", &handled, &duplicates)
			require.NoError(t, err)
		}
	}
	require.NoError(t, c.cmd.Wait())
	return handled, duplicates
}

type processSetup struct {
	dsn, url, endpoint string
	transport          string // "amqp" or "sql" (childTransport)
	db                 *gorm.DB
	sender             *bus.Bus // nil until newSender
}

// processCombo is a store and a transport that consumer processes share.
type processCombo struct{ store, transport string }

func (c processCombo) String() string { return c.store + "+" + c.transport }

// processCombos are the store × transport pairs that reach across
// processes: the in-memory transport does not, and the SQL transport has
// no SQLite adapter.
var processCombos = []processCombo{
	{"postgres", "amqp"}, {"postgres", "sql"}, {"mariadb", "amqp"}, {"mariadb", "sql"}, {"sqlite", "amqp"},
}

// outboxCombos are the processCombos with an outbox: SQLite has none
// (watermill-sql has no SQLite adapter).
var outboxCombos = []processCombo{
	{"postgres", "amqp"}, {"postgres", "sql"}, {"mariadb", "amqp"}, {"mariadb", "sql"},
}

// newProcessSetup is PostgreSQL and RabbitMQ.
func newProcessSetup(t *testing.T) processSetup {
	return newProcessSetupOn(t, processCombo{"postgres", "amqp"})
}

func newProcessSetupOn(t *testing.T, c processCombo) processSetup {
	var dsn, what string
	switch c.store {
	case "postgres":
		dsn, what = testenv.PostgresSchemaDSN(t), "PostgreSQL"
	case "mariadb":
		dsn, what = testenv.MySQLDatabaseDSN(t), "MariaDB"
	case "sqlite":
		dsn, what = testenv.SQLiteDSN(t), "SQLite"
	default:
		t.Fatalf("no store %q", c.store)
	}
	p := processSetup{dsn: dsn, endpoint: testenv.Name("proc"), transport: c.transport}
	p.db = testenv.Migrated(t, dsn, what)
	require.NoError(t, p.db.Exec("CREATE TABLE effects (message_id VARCHAR(100) NOT NULL, n INTEGER NOT NULL)").Error)
	if c.transport == "amqp" {
		p.url = testenv.RequireAMQP(t)
		deleteChildQueues(t, p.endpoint)
	}
	return p
}

// start starts a child process of mode on the setup's store and transport.
func (p processSetup) start(t *testing.T, mode string, crashAt int, env ...string) *consumer {
	t.Helper()
	return startChild(t, mode, p.dsn, p.url, p.endpoint, crashAt, append(env, childTransport+"="+p.transport)...)
}

// deleteChildQueues deletes, when the test ends, what the child processes
// of endpoint declare on the broker: its handler's queues and command
// topic, whichever of Work, Order and Charge the children's mode handles.
// Registered before the first child starts, it runs after they are killed.
// A child's own error topic is the caller's to delete (deleteErrorQueue).
func deleteChildQueues(t *testing.T, endpoint string) {
	for _, name := range []string{bus.MessageName[Work](), bus.MessageName[Order](), bus.MessageName[Charge]()} {
		group := bus.GroupOf(endpoint, name)
		amqptest.DeleteTopic(t, bus.CommandTopic(endpoint, name), group)
		amqptest.DeleteTopic(t, bus.EventTopic(name), group) // the queue: the event's exchange is shared
	}
}

// deleteErrorQueue deletes, when the test ends, the error queue that child
// processes declare for errorTopic, and the topic's exchange.
func deleteErrorQueue(t *testing.T, errorTopic string) {
	amqptest.DeleteTopic(t, errorTopic, transport.ErrorQueueGroup)
}

// newTransport returns a new transport of the setup's kind, closed (and
// on RabbitMQ its queues deleted) when the test ends.
func (p processSetup) newTransport(t *testing.T) transport.Transport {
	if p.transport == "sql" {
		tr, err := wsql.New(wsql.Config{DB: p.db, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	tr, err := amqp.New(amqp.Config{URL: p.url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	return tr
}

// withSender adds an in-process sender bus on the setup's transport.
func (p processSetup) withSender(t *testing.T) processSetup {
	var err error
	p.sender, err = bus.New(bus.Config{Endpoint: "sender", Transport: p.newTransport(t), Logger: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.sender.Close() })
	return p
}

// send sends Work n with message ID "work-n".
func (p processSetup) send(t *testing.T, n int) {
	require.NoError(t, bus.Send(context.Background(), p.sender, &Work{N: n}, bus.To(p.endpoint), bus.WithMessageID(workID(n))))
}

// effects returns how many effect rows exist and how many distinct messages they are for.
func (p processSetup) effects(t *testing.T) (rows, distinct int64) {
	require.NoError(t, p.db.Raw("SELECT COUNT(*), COUNT(DISTINCT n) FROM effects").Row().Scan(&rows, &distinct))
	return rows, distinct
}

// waitForEffects waits until messages 0 to want-1 each have an effect. It
// waits as long as effects keep coming and fails when none came for 20 s
// (or after 5 minutes in all): a lost message stops the count, a loaded
// machine only slows it (the SQL transport hands a consumer group one
// message at a time, across every process). The failure names the
// messages without an effect, then watches them a minute longer, so that
// it says whether they were slow or lost.
func (p processSetup) waitForEffects(t *testing.T, want int64) {
	t.Helper()
	const stall = 20 * time.Second
	start := time.Now()
	last, progressed := int64(-1), start
	for time.Since(progressed) < stall && time.Since(start) < 5*time.Minute {
		_, d := p.effects(t)
		if d >= want {
			return
		}
		if d > last {
			last, progressed = d, time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	missing := p.missingEffects(t, want)
	waited := time.Since(start).Round(time.Second)
	later := time.Now().Add(time.Minute)
	for time.Now().Before(later) {
		if _, d := p.effects(t); d >= want {
			t.Fatalf("timed out waiting for %d effects: after %s, %d had none (%v); all came in a minute later: slow, not lost",
				want, waited, len(missing), missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	still := p.missingEffects(t, want)
	t.Fatalf("timed out waiting for %d effects: after %s, %d had none (%v); a minute later %d still had none (%v)",
		want, waited, len(missing), missing, len(still), still)
}

// whereAreMissing says, for a failure's message, which messages below want
// have no effect, whether the inbox holds their keys (a key without its
// effect is a silent loss: both are written in one transaction) and what
// the error topic holds; then it watches them a minute longer and says
// whether they came: slow, or lost.
func (p processSetup) whereAreMissing(t *testing.T, want int64, errorTopic string) string {
	t.Helper()
	missing := p.missingEffects(t, want)
	ids := make([]string, len(missing))
	for i, n := range missing {
		ids[i] = workID(int(n))
	}
	var keys []string
	if len(ids) > 0 {
		require.NoError(t, p.db.Raw("SELECT message_id FROM postroom_inbox WHERE message_id IN ?", ids).Scan(&keys).Error)
	}
	errorTopicHolds := p.errorTopicLength(t, errorTopic)
	later := time.Now().Add(time.Minute)
	for time.Now().Before(later) && len(p.missingEffects(t, want)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("without an effect: %v; their inbox keys: %v; the error topic holds %d; a minute later still without: %v",
		missing, keys, errorTopicHolds, p.missingEffects(t, want))
}

// errorTopicLength is how many messages child processes moved to
// errorTopic: on RabbitMQ those waiting in its error queue, on the SQL
// transport the rows of its table (nothing consumes it in these tests).
func (p processSetup) errorTopicLength(t *testing.T, errorTopic string) int {
	t.Helper()
	if p.transport != "sql" {
		return errorQueueLength(t, p.url, errorTopic)
	}
	d, err := dialects.Of(p.db)
	require.NoError(t, err)
	table := watermillsql.DefaultPostgreSQLSchema{}.MessagesTable(errorTopic)
	if d == (mysql.Dialect{}) {
		table = watermillsql.DefaultMySQLSchema{}.MessagesTable(errorTopic)
	}
	var n int
	if err := p.db.Raw("SELECT COUNT(*) FROM " + table).Row().Scan(&n); err != nil {
		// Nothing was ever published to it: no table (PostgreSQL 42P01).
		require.True(t, dialect.MySQLError(err, 1146) || strings.Contains(err.Error(), "42P01"), "count %s: %v", table, err)
		return 0
	}
	return n
}

// missingEffects returns the message numbers below want without an effect.
func (p processSetup) missingEffects(t *testing.T, want int64) []int64 {
	var have []int64
	require.NoError(t, p.db.Raw("SELECT DISTINCT n FROM effects").Scan(&have).Error)
	seen := map[int64]bool{}
	for _, n := range have {
		seen[n] = true
	}
	var missing []int64
	for n := range want {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestCrashAfterCommitBeforeAck: a consumer process is killed with SIGKILL
// after its transaction commits and before the broker gets the ack. The
// broker delivers the message again to the restarted process, whose inbox
// skips it: every message has exactly one effect. On every store ×
// transport that reaches across processes.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	for _, combo := range processCombos {
		t.Run(combo.String(), func(t *testing.T) {
			p := newProcessSetupOn(t, combo).withSender(t)
			first := p.start(t, "consumer", 5)
			const messages = 20
			for n := range messages {
				p.send(t, n)
			}
			err := first.cmd.Wait()
			require.Error(t, err)
			status, ok := first.cmd.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "the failpoint killed the process: %v", err)

			second := p.start(t, "consumer", 0)
			p.waitForEffects(t, messages)
			_, duplicates := second.stop(t)
			rows, distinct := p.effects(t)
			require.EqualValues(t, messages, distinct, "no message lost")
			require.EqualValues(t, messages, rows, "no message applied twice")
			require.GreaterOrEqual(t, duplicates, 1, "the message in flight at the kill was redelivered and skipped")
		})
	}
}

// TestCompetingConsumerProcesses: three processes compete on one queue
// (RabbitMQ) or consumer group (the SQL transport), two subscriptions
// each; 30% of the messages are sent twice. Each message has exactly one
// effect, and the work was shared. On every store × transport that
// reaches across processes.
func TestCompetingConsumerProcesses(t *testing.T) {
	for _, combo := range processCombos {
		t.Run(combo.String(), func(t *testing.T) {
			p := newProcessSetupOn(t, combo).withSender(t)
			var consumers []*consumer
			for range 3 {
				consumers = append(consumers, p.start(t, "consumer", 0))
			}
			const messages = 200
			var wg sync.WaitGroup
			for part := range 4 { // four senders at once
				wg.Go(func() {
					for n := part; n < messages; n += 4 {
						p.send(t, n)
						if n%10 < 3 {
							p.send(t, n) // a re-published duplicate
						}
					}
				})
			}
			wg.Wait()
			p.waitForEffects(t, messages)
			totalHandled, totalDuplicates, busy := 0, 0, 0
			for _, c := range consumers {
				handled, duplicates := c.stop(t)
				totalHandled += handled
				totalDuplicates += duplicates
				if handled > 0 {
					busy++
				}
			}
			rows, distinct := p.effects(t)
			require.EqualValues(t, messages, distinct)
			require.EqualValues(t, messages, rows, "no message applied twice")
			require.Equal(t, messages, totalHandled)
			require.Equal(t, 60, totalDuplicates)
			require.GreaterOrEqual(t, busy, 2, "the processes shared the queue")
		})
	}
}

// TestOutboxSurvivesAKillBetweenCommitAndRelay: a handler sends two events
// through the outbox, and its process is killed with SIGKILL after COMMIT
// and before the relay (the broker refuses the relay until then). After a
// restart both events reach the downstream endpoint exactly once, counted
// behind its inbox, and the redelivered order is skipped, not re-sent. On
// every store × transport that reaches across processes and has an outbox
// (SQLite has none).
func TestOutboxSurvivesAKillBetweenCommitAndRelay(t *testing.T) {
	for _, combo := range outboxCombos {
		t.Run(combo.String(), func(t *testing.T) {
			p := newProcessSetupOn(t, combo).withSender(t)
			require.NoError(t, p.db.Exec("CREATE TABLE shipped (order_id VARCHAR(50) NOT NULL, parcel INTEGER NOT NULL)").Error)
			downstream, err := bus.New(bus.Config{Endpoint: testenv.Name("shipping"), Transport: p.newTransport(t), DB: p.db, Logger: testenv.Logger(t),
				Cleanup: bus.CleanupSchedule{Disabled: true}})
			require.NoError(t, err)
			require.NoError(t, bus.Handle(downstream, func(ctx context.Context, s *Shipped) error {
				return unitofwork.Tx(ctx).Exec("INSERT INTO shipped (order_id, parcel) VALUES (?, ?)", s.OrderID, s.Parcel).Error
			}, bus.WithInbox()))
			start(t, downstream, "error")

			first := p.start(t, "outbox", 1)
			require.NoError(t, bus.Send(context.Background(), p.sender, &Order{ID: "o-1"}, bus.To(p.endpoint)))
			err = first.cmd.Wait()
			status, ok := first.cmd.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "killed after commit: %v", err)
			var queued int64
			require.NoError(t, p.db.Raw("SELECT COUNT(*) FROM watermill_postroom_outbox").Scan(&queued).Error)
			require.EqualValues(t, 2, queued, "both events committed to the outbox with the handler")
			shipped := func() (n int64) {
				require.NoError(t, p.db.Raw("SELECT COUNT(*) FROM shipped").Scan(&n).Error)
				return n
			}
			require.Zero(t, shipped(), "nothing relayed before the kill")

			second := p.start(t, "outbox", 0)
			waitFor(t, "both events downstream", func() bool { return shipped() >= 2 })
			time.Sleep(time.Second) // room for a wrong third
			_, duplicates := second.stop(t)
			require.EqualValues(t, 2, shipped(), "each event exactly once")
			var distinct int64
			require.NoError(t, p.db.Raw("SELECT COUNT(DISTINCT parcel) FROM shipped").Scan(&distinct).Error)
			require.EqualValues(t, 2, distinct)
			require.Equal(t, 1, duplicates, "the redelivered order was skipped by the inbox")
		})
	}
}

// runUntilKilled runs a consumer process that is expected to kill itself
// (it may do so before it says it is ready) and checks that it did.
func runUntilKilled(t *testing.T, p processSetup, env ...string) {
	t.Helper()
	cmd := childCmd("consumer", p.dsn, p.url, p.endpoint, 0, append(env, childTransport+"="+p.transport)...)
	require.NoError(t, cmd.Start())
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "the poison message killed the process: %v", err)
}

// TestPoisonMessageThatKillsItsConsumer: a message whose handling kills the
// process (SIGKILL, as an out-of-memory kill would) is redelivered to each
// restarted process. On a quorum queue the broker counts those deliveries,
// so the guard moves the message to the error topic on the delivery after
// Config.MaxDeliveries, and the messages queued behind it are handled. On
// every store.
func TestPoisonMessageThatKillsItsConsumer(t *testing.T) {
	for _, combo := range processCombos {
		t.Run(combo.String(), func(t *testing.T) {
			if combo.transport == "sql" {
				// The first message a process reads of a topic is
				// counted in the database (postroom_deliveries).
				poisonKillsItsConsumer(t, combo, false, 4, 2)
				return
			}
			// Quorum queues count the deliveries (x-delivery-count);
			// on classic queues the bus counts the redeliveries in the
			// database (postroom_deliveries).
			for _, quorum := range []bool{true, false} {
				t.Run(map[bool]string{true: "quorum", false: "classic"}[quorum], func(t *testing.T) {
					poisonKillsItsConsumer(t, combo, quorum, 4, 2)
				})
			}
		})
	}
}

// TestPoisonMessageThatKillsItsBatch: the same with the poison message in
// a batch (WithBatch, HandleBatch) of the messages in flight with it, on
// RabbitMQ's classic queues: only the poison message goes to the error
// topic, and each of the others is handled once. The messages wait in the
// queue before the first process starts, and each delivery waits a moment
// before its handler, so that a batch forms of the messages taken together.
// Counted together at each redelivery, the innocent members would reach
// MaxDeliveries with it; the bus handles a redelivery alone, and one
// that came back before one at a time, counted when it
// runs: an innocent message is counted at most twice (on SQLite its first
// redelivery waits for the connection the poison message's run holds), so
// MaxDeliveries is 3 here. (The SQL transport hands out one message of a handler at a time,
// so no batch forms there: TestPoisonMessageThatKillsItsConsumer. On
// quorum queues the broker counts every message in flight at a crash:
// docs/guarantees.md.)
func TestPoisonMessageThatKillsItsBatch(t *testing.T) {
	for _, combo := range processCombos {
		if combo.transport == "sql" {
			continue
		}
		t.Run(combo.String(), func(t *testing.T) {
			for _, shape := range []struct {
				name string
				env  []string
			}{{"WithBatch", []string{childBatch + "=4", childGather + "=1"}}, {"HandleBatch", []string{childBatch + "=4", childBatchFn + "=1", childGather + "=1"}}} {
				t.Run(shape.name, func(t *testing.T) {
					poisonKillsItsConsumer(t, combo, false, 8, 3, shape.env...)
				})
			}
		})
	}
}

// poisonKillsItsConsumer is TestPoisonMessageThatKillsItsConsumer on one
// store with RabbitMQ's quorum or classic queues, or the SQL transport:
// Work 0, the poison message, is sent first and messages-1 others behind
// it; the consumers' Config.MaxDeliveries is maxDeliveries, so that many
// processes die before the next moves it aside; env configures them. More
// than 4 messages wait in the queue before the first process starts (a
// batch test).
func poisonKillsItsConsumer(t *testing.T, combo processCombo, quorum bool, messages, maxDeliveries int, env ...string) {
	p := newProcessSetupOn(t, combo).withSender(t)
	errSub, err := p.newTransport(t).Subscriber(testenv.Name("errors_"), 1)
	require.NoError(t, err)
	// An error topic of its own: its children declare their error queue as
	// a quorum queue, which a classic declaration of the same queue (by
	// any other test) would refuse.
	errorTopic := testenv.Name("error_")
	deleteErrorQueue(t, errorTopic)
	require.NoError(t, errSub.(message.SubscribeInitializer).SubscribeInitialize(errorTopic))
	env = append([]string{childPoison + "=0", childMaxDel + "=" + strconv.Itoa(maxDeliveries), childErrors + "=" + errorTopic}, env...)
	if quorum {
		env = append(env, childQuorum+"=1")
	}

	waiting := messages > 4
	if waiting {
		sub, err := p.newTransport(t).Subscriber(bus.GroupOf(p.endpoint, bus.MessageName[Work]()), 1)
		require.NoError(t, err)
		require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(bus.CommandTopic(p.endpoint, bus.MessageName[Work]())))
		for n := range messages { // Work 0 is the poison message, the others wait behind it
			p.send(t, n)
		}
	}
	first := p.start(t, "consumer", 0, env...)
	for n := range messages {
		if !waiting { // Work 0 is the poison message, the others wait behind it
			p.send(t, n)
		}
	}
	err = first.cmd.Wait()
	status, ok := first.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "the poison message killed the process: %v", err)
	for range maxDeliveries - 1 { // its next deliveries kill the next ones
		runUntilKilled(t, p, env...)
	}

	third := p.start(t, "consumer", 0, env...)
	p.waitForEffects(t, int64(messages-1))
	// The poison message may come back to the third process after the
	// others (a redelivery waits its turn): it is read from the error
	// topic before that process stops: a stop right after the last effect
	// could give it back unhandled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed, err := errSub.Subscribe(ctx, errorTopic)
	require.NoError(t, err)
	var poison *message.Message
	for msg := range failed {
		msg.Ack()
		require.Equal(t, workID(0), msg.UUID, "only the poison message goes to the error topic")
		poison = msg
		break
	}
	require.NotNil(t, poison, "the poison message did not reach the error topic")
	require.Contains(t, poison.Metadata.Get(metadata.ErrorReason), fmt.Sprintf("delivered %d times without being handled", maxDeliveries))
	third.stop(t)
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages-1, rows)
	require.EqualValues(t, messages-1, distinct)
	var counts int64
	require.NoError(t, p.db.Raw("SELECT COUNT(*) FROM postroom_deliveries WHERE SUBSTR(consumer, 1, ?) = ?", len(p.endpoint)+1, p.endpoint+"/").Row().Scan(&counts))
	require.Zero(t, counts, "the counts of messages settled (handled, or moved aside) are forgotten")
}

// TestDelayedMessagesSurviveKillingEveryProcess: a delayed retry and a
// delayed delivery wait in the database while every consumer process is
// SIGKILLed; the restarted process delivers each once, not before its
// time, each through its delayed row. On every store × transport that
// reaches across processes.
func TestDelayedMessagesSurviveKillingEveryProcess(t *testing.T) {
	for _, combo := range processCombos {
		t.Run(combo.String(), func(t *testing.T) {
			p := newProcessSetupOn(t, combo)
			sender, err := bus.New(bus.Config{Endpoint: "sender", Transport: p.newTransport(t), DB: p.db, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sender.Close() })
			failing := fmt.Sprintf("%s=%d", childFailTil, time.Now().Add(time.Hour).UnixMilli())
			first := p.start(t, "consumer", 0, childDelayed+"=1", failing)
			sent := time.Now()
			ctx := context.Background()
			require.NoError(t, bus.Send(ctx, sender, &Work{N: 1}, bus.To(p.endpoint), bus.WithMessageID(workID(1))))
			require.NoError(t, bus.Send(ctx, sender, &Work{N: 2}, bus.To(p.endpoint), bus.WithMessageID(workID(2)), bus.DeliverAfter(4*time.Second)))
			waitFor(t, "a delayed retry and a delayed delivery waiting", func() bool {
				var n int64
				return p.db.Raw("SELECT COUNT(*) FROM postroom_delayed").Scan(&n).Error == nil && n == 2
			})
			// The failed Work 1 is acked right after its retry's row
			// commits: a kill before that ack would have the transport
			// deliver Work 1 again at once, and the delayed retry would
			// come second, as a duplicate (the check below). Both are
			// due 4 s after the send, well after the kill.
			time.Sleep(time.Second)
			require.NoError(t, first.cmd.Process.Kill())
			_ = first.cmd.Wait()
			rows, _ := p.effects(t)
			require.Zero(t, rows, "nothing handled before the kill")

			second := p.start(t, "consumer", 0, childDelayed+"=1")
			p.waitForEffects(t, 2)
			require.GreaterOrEqual(t, time.Since(sent), 4*time.Second, "not before their time")
			time.Sleep(500 * time.Millisecond) // room for a wrong second delivery
			handled, duplicates := second.stop(t)
			require.Equal(t, 2, handled)
			require.Zero(t, duplicates, "Work 1 came back as a redelivery, not through its delayed retry")
			rows, distinct := p.effects(t)
			require.EqualValues(t, 2, rows, "each once")
			require.EqualValues(t, 2, distinct)
			var left int64
			require.NoError(t, p.db.Raw("SELECT COUNT(*) FROM postroom_delayed").Scan(&left).Error)
			require.Zero(t, left)
		})
	}
}

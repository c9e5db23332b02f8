package bus_test

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestBrokerConnectionsClosedMidRun: RabbitMQ closes every connection while
// a consumer process works and the sender sends. The consumers and the
// publisher reconnect; every message has exactly one effect.
func TestBrokerConnectionsClosedMidRun(t *testing.T) {
	if !*faultBroker {
		t.Skip("closes every connection of the shared RabbitMQ: run alone with -fault.broker, as scripts/test.sh does")
	}
	p := newProcessSetup(t)
	rabbitmqctl, err := exec.LookPath("rabbitmqctl")
	require.NoError(t, err, "rabbitmqctl is needed to close the broker's connections (it comes with rabbitmq-server)")
	consumers := []*consumer{
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
	}
	const messages = 1500
	sender := startChild(t, "sender", p.dsn, p.url, p.endpoint, messages)
	time.Sleep(time.Second) // about a third sent
	out, err := exec.Command(rabbitmqctl, "close_all_connections", "postroom fault test").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var sent string
	for line := range sender.lines {
		sent = line
	}
	require.NoError(t, sender.cmd.Wait())
	require.Equal(t, fmt.Sprintf("sent %d", messages), sent)
	p.waitForEffects(t, messages)
	handled := 0
	for _, c := range consumers {
		h, _ := c.stop(t)
		handled += h
	}
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")
	require.Equal(t, messages, handled)
}

var faultBroker = flag.Bool("fault.broker", false, "run TestBrokerConnectionsClosedMidRun, which closes every connection of the local RabbitMQ, other tests' too (scripts/test.sh runs it alone)")

var faultDB = flag.Bool("fault.db", false, "run TestDatabaseRestartedMidRun and TestDatabaseOutageOfAMinute, which restart the local PostgreSQL (scripts/test.sh runs them alone)")

// TestDatabaseRestartedMidRun: PostgreSQL restarts while two consumer
// processes work. Handlers fail, retry in process with backoff, and the run
// converges: every message exactly once. It restarts the server every test
// shares, so it runs only with -fault.db, alone (scripts/test.sh does).
func TestDatabaseRestartedMidRun(t *testing.T) {
	if !*faultDB {
		t.Skip("restarts PostgreSQL: run alone with -fault.db, as scripts/test.sh does")
	}
	version := pgCluster(t)
	p := newProcessSetup(t).withSender(t)
	consumers := []*consumer{
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
	}
	const messages = 1500
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for n := range messages {
			p.send(t, n)
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart").CombinedOutput()
	require.NoError(t, err, "%s", out)
	<-sent
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var distinct int64
		// The test's own pool reconnects too.
		if err := p.db.Raw("SELECT COUNT(DISTINCT n) FROM effects").Scan(&distinct).Error; err == nil && distinct == messages {
			break
		}
		require.True(t, time.Now().Before(deadline), "did not converge after the restart")
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range consumers {
		c.stop(t)
	}
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")
}

// pgCluster returns the version of the local Debian PostgreSQL cluster.
func pgCluster(t *testing.T) string {
	versions, _ := filepath.Glob("/etc/postgresql/*")
	require.NotEmpty(t, versions, "needs a Debian PostgreSQL cluster (pg_ctlcluster) on this machine")
	return filepath.Base(versions[len(versions)-1])
}

// TestDatabaseOutageOfAMinute: PostgreSQL is stopped for 60 seconds while
// three consumer processes, with the default retry policy (3 retries, about
// 0.7 s), handle a steady stream. Rate limiting waits the outage out: no
// message reaches the error topic, none is lost or applied twice, and the
// backlog is handled within two minutes of the restart. Run alone with
// -fault.db (scripts/test.sh does).
func TestDatabaseOutageOfAMinute(t *testing.T) {
	if !*faultDB {
		t.Skip("stops PostgreSQL: run alone with -fault.db, as scripts/test.sh does")
	}
	version := pgCluster(t)
	p := newProcessSetup(t).withSender(t)
	errorTopic := testenv.Name("error_")
	deleteErrorQueue(t, errorTopic)
	env := []string{childDefault + "=1", childErrors + "=" + errorTopic}
	var consumers []*consumer
	for range 3 {
		consumers = append(consumers, startChild(t, "consumer", p.dsn, p.url, p.endpoint, 0, env...))
	}
	const messages = 2000 // one every 40 ms: 80 s of steady load around the outage
	sent := p.steadyStream(t, messages)
	time.Sleep(5 * time.Second)
	pgctl := func(action string) {
		out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	pgctl("stop")
	t.Cleanup(func() { _ = exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start").Run() })
	time.Sleep(60 * time.Second)
	pgctl("start")
	restarted := time.Now()
	<-sent
	deadline := restarted.Add(2 * time.Minute)
	for {
		var distinct int64
		if err := p.db.Raw("SELECT COUNT(DISTINCT n) FROM effects").Scan(&distinct).Error; err == nil && distinct == messages {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backlog was not handled within two minutes of the restart: %s", p.whereAreMissing(t, messages, errorTopic))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("every message handled %s after PostgreSQL started again", time.Since(restarted).Round(time.Second))
	for _, c := range consumers {
		c.stop(t)
	}
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")

	require.Zero(t, errorQueueLength(t, p.url, errorTopic), "no message reached the error topic")
}

// steadyStream sends Work 0..messages-1, one every 40 ms, in the
// background; the channel closes when the last is sent.
func (p processSetup) steadyStream(t *testing.T, messages int) <-chan struct{} {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for n := range messages {
			p.send(t, n)
			time.Sleep(40 * time.Millisecond)
		}
	}()
	return sent
}

// startDownstream starts, in the test's process, an endpoint on the
// setup's transport and database that handles the WorkDone events child
// processes send through the outbox, with the inbox, recording each in the
// table done with the endpoint that sent it: the event's exchange on
// RabbitMQ is shared, and the fault tests run side by side (a run counted
// the other test's events too). errorTopic is its own error topic, which
// nothing reads: p.errorTopicLength counts it.
func (p processSetup) startDownstream(t *testing.T, errorTopic string) {
	require.NoError(t, p.db.Exec("CREATE TABLE done (n INTEGER NOT NULL, source VARCHAR(200) NOT NULL)").Error)
	downstream, err := bus.New(bus.Config{Endpoint: testenv.Name("audit"), Transport: p.newTransport(t), DB: p.db, ErrorTopic: errorTopic,
		Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(downstream, func(ctx context.Context, d *WorkDone) error {
		return bus.Tx(ctx).Exec("INSERT INTO done (n, source) VALUES (?, ?)", d.N, bus.Metadata(ctx)[metadata.SourceEndpoint]).Error
	}, bus.WithInbox()))
	if p.transport != "sql" {
		deleteErrorQueue(t, errorTopic)
	}
	run(t, downstream)
}

// events returns how many events of the setup's endpoint, numbered below
// below, the downstream endpoint handled, and for how many messages.
func (p processSetup) events(below int64) (rows, distinct int64, err error) {
	err = p.db.Raw("SELECT COUNT(*), COUNT(DISTINCT n) FROM done WHERE source = ? AND n < ?", p.endpoint, below).Row().Scan(&rows, &distinct)
	return rows, distinct, err
}

// errorQueueLength is how many messages wait in the error queue that
// child processes declared for errorTopic.
func errorQueueLength(t *testing.T, url, errorTopic string) int {
	t.Helper()
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(amqp.QueueName(errorTopic, bus.ErrorQueueGroup), true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

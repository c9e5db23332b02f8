package bus_test

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
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
		return unitofwork.Tx(ctx).Exec("INSERT INTO done (n, source) VALUES (?, ?)", d.N, bus.Metadata(ctx)[metadata.SourceEndpoint]).Error
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
	q, err := ch.QueueDeclarePassive(amqp.QueueName(errorTopic, transport.ErrorQueueGroup), true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

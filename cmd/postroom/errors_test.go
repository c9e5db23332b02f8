package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// Invoice is the message of the errors test.
type Invoice struct{ N int }

func (Invoice) MessageName() string { return "test.Invoice" }

// TestErrorsListShowReplay: a handler with an inbox fails three messages
// into the error topic on RabbitMQ (one ID twice); once it is fixed, they
// are listed, shown and replayed with their original IDs: each is handled
// once, and the second copy of the repeated ID is skipped as a duplicate.
func TestErrorsListShowReplay(t *testing.T) {
	url := testenv.RequireAMQP(t)
	db := testenv.Postgres(t)
	require.NoError(t, db.Exec("CREATE TABLE invoices (n INTEGER NOT NULL)").Error)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	errorTopic := testenv.Name("error_")
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("billing"), Transport: tr, DB: db, ErrorTopic: errorTopic,
		Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	var broken atomic.Bool
	broken.Store(true)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *Invoice) error {
		if broken.Load() {
			return errors.New("tax service down")
		}
		return unitofwork.Tx(ctx).Exec("INSERT INTO invoices (n) VALUES (?)", m.N).Error
	}, bus.WithInbox()))
	ctx := testbus.Run(t, b)

	c := b.Counters()
	for _, m := range []struct {
		n  int
		id string
	}{{1, "inv-1"}, {1, "inv-1"}, {2, "inv-2"}} {
		require.NoError(t, bus.Send(ctx, b, &Invoice{N: m.n}, bus.To(b.Endpoint()), bus.WithMessageID(m.id)))
	}
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 3 })

	flags := []string{"--amqp", url, "--error-topic", errorTopic}
	out, err := run(t, append([]string{"errors", "list", "--json"}, flags...)...)
	require.NoError(t, err)
	var list []failedMessage
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 3)
	require.ElementsMatch(t, []string{"inv-1", "inv-1", "inv-2"}, []string{list[0].ID, list[1].ID, list[2].ID})
	require.Equal(t, "tax service down", list[0].Reason)
	require.Equal(t, "test.Invoice", list[0].Handler)
	require.Equal(t, bus.GroupOf(b.Endpoint(), "test.Invoice"), list[0].Group, "the endpoint group tells two endpoints' handlers of one name apart")
	require.Equal(t, 1, list[0].Attempts)
	require.Contains(t, out, `"attempts":1,`, "a number, not a string")

	out, err = run(t, append([]string{"errors", "list"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "REASON")
	require.Contains(t, out, "tax service down")
	require.Contains(t, out, bus.GroupOf(b.Endpoint(), "test.Invoice"))

	out, err = run(t, append([]string{"errors", "show", "inv-2"}, flags...)...)
	require.NoError(t, err)
	var shown failedMessage
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.JSONEq(t, `{"N":2}`, shown.Payload)
	require.Equal(t, 1, shown.Attempts)

	broken.Store(false)
	out, err = run(t, append([]string{"errors", "replay", "inv-2"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1\n")
	waitUntil(t, func() bool { return c.Total(metrics.Handled) == 1 })

	out, err = run(t, append([]string{"errors", "replay", "--all"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 2\n")
	waitUntil(t, func() bool { return c.Total(metrics.Handled) == 2 && c.Total(metrics.Duplicate) == 1 })

	var rows []int
	require.NoError(t, db.Raw("SELECT n FROM invoices ORDER BY n").Scan(&rows).Error)
	require.Equal(t, []int{1, 2}, rows, "each replayed message handled once")
	out, err = run(t, append([]string{"errors", "list", "--json"}, flags...)...)
	require.NoError(t, err)
	require.JSONEq(t, "[]", out, "the error topic is empty")
	_, err = run(t, append([]string{"errors", "replay", "inv-2"}, flags...)...)
	require.ErrorContains(t, err, "nothing to replay")
}

// TestErrorsDelete: delete removes the chosen messages from the error
// topic, every copy of an ID, without handling them; "" removes a message
// without an ID and says so; --all removes the rest; a delete that finds
// nothing fails.
func TestErrorsDelete(t *testing.T) {
	url, _, errorTopic, b := billingOnRabbitMQ(t)
	var handled atomic.Int32
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *Invoice) error {
		handled.Add(1)
		return errors.New("tax service down")
	}))
	ctx := testbus.Run(t, b)
	c := b.Counters()
	for _, id := range []string{"del-1", "del-1", "del-2", "del-3"} {
		require.NoError(t, bus.Send(ctx, b, &Invoice{N: 1}, bus.To(b.Endpoint()), bus.WithMessageID(id)))
	}
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 4 })
	ids := func() []string {
		out, err := run(t, "errors", "list", "--json", "--amqp", url, "--error-topic", errorTopic)
		require.NoError(t, err)
		var list []failedMessage
		require.NoError(t, json.Unmarshal([]byte(out), &list))
		var ids []string
		for _, m := range list {
			ids = append(ids, m.ID)
		}
		return ids
	}

	flags := []string{"--amqp", url, "--error-topic", errorTopic}
	out, err := run(t, append([]string{"errors", "delete", "del-1"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "deleted 2\n", "both copies of the ID")
	require.ElementsMatch(t, []string{"del-2", "del-3"}, ids())

	_, err = run(t, append([]string{"errors", "delete"}, flags...)...)
	require.ErrorContains(t, err, "pass the IDs to delete, or --all")
	_, err = run(t, append([]string{"errors", "delete", "del-1"}, flags...)...)
	require.ErrorContains(t, err, "nothing to delete")

	// A message without an ID (a producer that set none) is named by "".
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Publish("", amqp.QueueName(errorTopic, transport.ErrorQueueGroup), false, false, amqp091.Publishing{Body: []byte("no ID")}))
	require.NoError(t, ch.Close())
	waitUntil(t, func() bool { return len(ids()) == 3 })
	out, err = run(t, append([]string{"errors", "delete", ""}, flags...)...)
	require.NoError(t, err, "the message without an ID was deleted")
	require.Contains(t, out, "deleted (no ID)\n")
	require.Contains(t, out, "deleted 1\n")
	require.ElementsMatch(t, []string{"del-2", "del-3"}, ids())

	out, err = run(t, append([]string{"errors", "delete", "--all"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "deleted 2\n")
	require.Empty(t, ids())
	require.EqualValues(t, 4, handled.Load(), "a deleted message is not handled")
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 10*time.Millisecond)
}

// TestErrorsReplayAllOnceEach: replay --all while the handler still fails
// replays each message once, though the running endpoint moves each back
// into the error queue at once (a replay that reads on picks the moved
// copies up again: tens to hundreds of replays for 4 messages). Browse
// reads only what the queue held when it began.
func TestErrorsReplayAllOnceEach(t *testing.T) {
	url, _, errorTopic, b := billingOnRabbitMQ(t)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *Invoice) error {
		return errors.New("tax service down")
	}))
	ctx := testbus.Run(t, b)
	c := b.Counters()
	for n := range 4 {
		require.NoError(t, bus.Send(ctx, b, &Invoice{N: n}, bus.To(b.Endpoint())))
	}
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 4 })

	flags := []string{"--amqp", url, "--error-topic", errorTopic}
	out, err := run(t, append([]string{"errors", "replay", "--all"}, flags...)...)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 4\n")
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 8 })
	time.Sleep(200 * time.Millisecond)
	require.EqualValues(t, 8, c.Total(metrics.Failed), "each message failed once more, no more")
	out, err = run(t, append([]string{"errors", "list", "--json"}, flags...)...)
	require.NoError(t, err)
	var list []failedMessage
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 4)
}

// TestErrorsReplayKeepsWhatItCannotReplay: a message in the error topic
// that names no handler (put there by hand, not moved by a bus) stays, is
// named, and the replay goes on with the others; the command fails to say
// so, rather than stopping the whole replay at that message.
func TestErrorsReplayKeepsWhatItCannotReplay(t *testing.T) {
	url, tr, errorTopic, b := billingOnRabbitMQ(t)
	failing := failingUntilFixed(t, b)
	ctx := testbus.Run(t, b)
	c := b.Counters()
	require.NoError(t, bus.Send(ctx, b, &Invoice{N: 1}, bus.To(b.Endpoint())))
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 1 })
	stray := message.NewMessage("stray-1", []byte(`{}`))
	require.NoError(t, tr.Publisher().Publish(errorTopic, stray))
	require.NoError(t, bus.Send(ctx, b, &Invoice{N: 2}, bus.To(b.Endpoint())))
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 2 })
	failing.Store(false)

	flags := []string{"--amqp", url, "--error-topic", errorTopic}
	out, err := run(t, append([]string{"errors", "replay", "--all"}, flags...)...)
	require.ErrorContains(t, err, "1 message(s) cannot be replayed")
	require.Contains(t, out, "kept stray-1 in the error topic")
	require.Contains(t, out, "replayed 2\n", "the one after the stray message too")
	waitUntil(t, func() bool { return c.Total(metrics.Handled) == 2 })
	out, err = run(t, append([]string{"errors", "list", "--json"}, flags...)...)
	require.NoError(t, err)
	var list []failedMessage
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
}

// billingOnRabbitMQ is a bus of a new endpoint on RabbitMQ, with its own
// error topic and no retries: a failure goes to the error topic at once.
func billingOnRabbitMQ(t *testing.T) (url string, tr *amqp.Transport, errorTopic string, b *bus.Bus) {
	t.Helper()
	url = testenv.RequireAMQP(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	errorTopic = testenv.Name("error_")
	b, err = bus.New(bus.Config{Endpoint: testenv.Name("billing"), Transport: tr, ErrorTopic: errorTopic,
		Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	return url, tr, errorTopic, b
}

// TestErrorsWarnOfAnErrorQueueWithoutDeliveryLimit: on a quorum error
// queue declared by an earlier postroom without x-delivery-limit, the
// errors commands print the bus's warning on stderr (RabbitMQ 4.0 to 4.2
// drop its messages after 20 looks) and still list it; --json stays JSON
// on stdout. The bus's own warning comes only at its start, where an
// operator running the commands does not see it.
func TestErrorsWarnOfAnErrorQueueWithoutDeliveryLimit(t *testing.T) {
	url := testenv.RequireAMQP(t)
	errorTopic := testenv.Name("error_")
	queue := amqp.QueueName(errorTopic, transport.ErrorQueueGroup)
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum})
	require.NoError(t, err)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDelete(queue, false, false, false)
		require.NoError(t, err)
		require.NoError(t, ch.Close())
	})
	require.NoError(t, ch.Close())

	var stdout, stderr bytes.Buffer
	require.NoError(t, execute(context.Background(), []string{"errors", "list", "--json", "--amqp", url, "--error-topic", errorTopic}, &stdout, &stderr))
	require.JSONEq(t, "[]", stdout.String())
	require.Equal(t, "warning: queue "+queue+": the error queue has no x-delivery-limit (declared by an earlier postroom); "+
		"on RabbitMQ 4.0 to 4.2 a quorum queue without one drops a failed message after 20 looks at the error queue: "+
		"add a policy with delivery-limit 2147483647 for it, or drain and delete it so that it is declared again\n", stderr.String())
}

// TestErrorsSayWhatTheLimitLeftOut: with more messages in the error topic
// than --limit, list says on stderr how many it did not list, and replay
// --all fails saying that messages stay. Stopping at the limit without a
// word, a replay --all of 1,216 messages says "replayed 999" and leaves
// 216 behind unannounced.
func TestErrorsSayWhatTheLimitLeftOut(t *testing.T) {
	url, _, errorTopic, b := billingOnRabbitMQ(t)
	broken := failingUntilFixed(t, b)
	ctx := testbus.Run(t, b)
	c := b.Counters()
	for n := range 5 {
		require.NoError(t, bus.Send(ctx, b, &Invoice{N: n}, bus.To(b.Endpoint())))
	}
	waitUntil(t, func() bool { return c.Total(metrics.Failed) == 5 })

	flags := []string{"--amqp", url, "--error-topic", errorTopic, "--limit", "3"}
	var stdout, stderr bytes.Buffer
	require.NoError(t, execute(context.Background(), append([]string{"errors", "list", "--json"}, flags...), &stdout, &stderr))
	var list []failedMessage
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &list))
	require.Len(t, list, 3)
	require.Equal(t, "warning: listed the first 3 of the 5 messages in error topic "+errorTopic+" (--limit 3)\n", stderr.String())

	broken.Store(false)
	out, err := run(t, append([]string{"errors", "replay", "--all"}, flags...)...)
	require.ErrorContains(t, err, "replay --all looked at the first 3 of the 5 messages in error topic "+errorTopic+" (--limit 3): run it again for the rest")
	require.Contains(t, out, "replayed 3\n")
	out, err = run(t, append([]string{"errors", "replay", "--all"}, flags...)...)
	require.NoError(t, err, "the two left, under the limit")
	require.Contains(t, out, "replayed 2\n")
	waitUntil(t, func() bool { return c.Total(metrics.Handled) == 5 })
}

// failingUntilFixed registers b's Invoice handler, which fails with "tax
// service down" until the returned flag is set to false.
func failingUntilFixed(t *testing.T, b *bus.Bus) *atomic.Bool {
	t.Helper()
	var failing atomic.Bool
	failing.Store(true)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *Invoice) error {
		if failing.Load() {
			return errors.New("tax service down")
		}
		return nil
	}))
	return &failing
}

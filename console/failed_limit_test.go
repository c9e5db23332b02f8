package console_test

import (
	"math"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// TestFailedWarnsOfAnErrorQueueWithoutDeliveryLimit: a quorum error queue
// declared by an earlier postroom without x-delivery-limit (RabbitMQ 4.0
// to 4.2 drop its messages after 20 looks) is named on the overview and
// the failed-messages page, with the bus's warning; a classic queue and
// one with postroom's limit are not. The bus's own warning comes only at
// its start, where an operator on the console does not see it.
func TestFailedWarnsOfAnErrorQueueWithoutDeliveryLimit(t *testing.T) {
	url := testenv.RequireAMQP(t)
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	for name, tc := range map[string]struct {
		args amqp091.Table
		warn bool
	}{
		"quorum without a limit": {amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum}, true},
		"quorum with postroom's limit": {amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum,
			"x-delivery-limit": int64(math.MaxInt32)}, false},
		"classic": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			topic := testenv.Name("error_")
			queue := amqp.QueueName(topic, transport.ErrorQueueGroup)
			ch, err := conn.Channel()
			require.NoError(t, err)
			_, err = ch.QueueDeclare(queue, true, false, false, false, tc.args)
			require.NoError(t, err)
			t.Cleanup(func() {
				ch, err := conn.Channel()
				require.NoError(t, err)
				_, err = ch.QueueDelete(queue, false, false, false)
				require.NoError(t, err)
				require.NoError(t, ch.Close())
			})
			require.NoError(t, ch.Publish("", queue, false, false, amqp091.Publishing{MessageId: "failed-1"}))
			require.NoError(t, ch.Close())

			f := newFixture(t, testenv.SQLite(t), console.Config{AMQPURL: url, ErrorTopic: topic})
			warning := "queue " + queue + ": the error queue has no x-delivery-limit (declared by an earlier postroom); " +
				"on RabbitMQ 4.0 to 4.2 a quorum queue without one drops a failed message after 20 looks at the error queue: " +
				"add a policy with delivery-limit 2147483647 for it, or drain and delete it so that it is declared again"
			var body string
			require.Eventually(t, func() bool { // a quorum queue takes a read's messages back a moment after it
				_, body, _ = f.do(t, "GET", "/failed", nil, nil)
				return strings.Contains(body, "failed-1")
			}, 5*time.Second, 20*time.Millisecond, "the error queue is read")
			_, overview, _ := f.do(t, "GET", "/", nil, nil)
			for path, body := range map[string]string{"/failed": body, "/": overview} {
				require.NotContains(t, body, `class="error"`, path)
				if tc.warn {
					require.Contains(t, body, warning, path)
				} else {
					require.NotContains(t, body, "x-delivery-limit", path)
				}
			}
		})
	}
}

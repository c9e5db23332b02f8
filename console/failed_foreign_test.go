package console_test

import (
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

var (
	groupDelete = regexp.MustCompile(`href="(/failed/confirm\?action=delete[^"]*reason=[^"]*)">Delete group`)
	rowDelete   = regexp.MustCompile(`href="(/failed/confirm\?action=delete&amp;copy=[^"]*)">Delete</a>`)
)

// TestAMessageNoBusMovedCanBeDeleted: two messages in the error queue that
// no bus moved there (no message_id, no error metadata: a dead-letter
// policy, a shovel) are grouped by the transport's problem with them; the
// row's Delete names its copy by digest and takes that one, and the
// group's Delete takes the other. A group selected by the bus's (empty)
// reason matches nothing, and a row's Delete by its empty ID is refused.
func TestAMessageNoBusMovedCanBeDeleted(t *testing.T) {
	tr := amqptest.New(t, amqp.Config{})
	topic := testenv.Name("error_")
	sub, err := tr.Subscriber(transport.ErrorQueueGroup, 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	conn, err := amqp091.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := amqp.QueueName(topic, transport.ErrorQueueGroup)
	for _, body := range []string{"foreign 1", "foreign 2"} {
		require.NoError(t, ch.Publish("", queue, false, false, amqp091.Publishing{Body: []byte(body)}))
	}
	require.NoError(t, ch.Close())
	e := errorTopic{f: newFixture(t, testenv.SQLite(t), console.Config{AMQPURL: testenv.AMQPURL(), ErrorTopic: topic}),
		ready: func(t *testing.T) int {
			ch, err := conn.Channel()
			require.NoError(t, err)
			defer ch.Close()
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			require.NoError(t, err)
			return q.Messages
		}}
	e.settle(t, 2)

	for _, tc := range []struct {
		link   *regexp.Regexp
		button string
		left   int
	}{{rowDelete, "Delete 1", 1}, {groupDelete, "Delete 1", 0}} {
		_, body, _ := e.f.do(t, "GET", "/failed", nil, nil)
		m := tc.link.FindStringSubmatch(body)
		require.NotNil(t, m, body)
		e.settle(t, tc.left+1)
		form := e.f.confirm(t, html.UnescapeString(m[1]), tc.button)
		e.settle(t, tc.left+1)
		status, body, _ := e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
		require.Equal(t, http.StatusSeeOther, status, body)
		e.settle(t, tc.left)
	}
}

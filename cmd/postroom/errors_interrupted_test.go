package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// dropAfter writes the command's output and drops the proxy's
// connections once the output holds line.
type dropAfter struct {
	bytes.Buffer
	line  string
	proxy *amqptest.Proxy
}

func (w *dropAfter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if w.line != "" && strings.Contains(w.String(), w.line) {
		w.line = ""
		w.proxy.Drop()
	}
	return n, err
}

// TestAnInterruptedReplaySaysWhatItReplayed: a replay --all whose
// connection drops once the first message is replayed says that it
// replayed one and removed it, and the other two stay in the error topic,
// unsent. A replay that prints "replayed" before the original is removed,
// and removes the originals only when the whole replay ends, leaves the
// first copy sent and all three originals in the error topic after the
// drop, and the next replay sends the first again.
func TestAnInterruptedReplaySaysWhatItReplayed(t *testing.T) {
	tr := amqptest.New(t, amqp.Config{})
	errorTopic, retryTopic, group := testenv.Name("error_"), testenv.Name("invoice_"), testenv.Name("billing")
	for topic, g := range map[string]string{errorTopic: transport.ErrorQueueGroup, retryTopic: group} {
		sub, err := tr.Subscriber(g, 1)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	}
	for i := range 3 {
		msg := message.NewMessage(fmt.Sprintf("inv-%d", i), []byte("{}"))
		msg.Metadata.Set(metadata.ErrorTopic, retryTopic)
		msg.Metadata.Set(metadata.ErrorGroup, group)
		require.NoError(t, tr.Publisher().Publish(errorTopic, msg))
	}
	proxy, url := amqptest.NewProxy(t)
	out := &dropAfter{line: "replayed inv-0 to", proxy: proxy}
	err := execute(context.Background(), []string{"errors", "replay", "--all", "--amqp", url, "--error-topic", errorTopic}, out, out)
	require.Error(t, err)
	require.Contains(t, out.String(), "replayed 1 and removed them from the error topic before the stop; the rest stay there")
	require.NotContains(t, out.String(), "inv-1 to")

	conn, err := amqp091.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	ready := func(queue string) int {
		st, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(t, err)
		return st.Messages
	}
	require.Eventually(t, func() bool { return ready(amqp.QueueName(errorTopic, transport.ErrorQueueGroup)) == 2 }, 5*time.Second, 20*time.Millisecond,
		"inv-1 and inv-2 stay in the error topic")
	require.Equal(t, 1, ready(amqp.QueueName(retryTopic, group)), "one copy sent")
}

package amqpqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestAnInterruptedRetryDuplicatesAtMostTheMessageItWasAt: a "retry all"
// of three messages whose connection drops (the console killed, a broker
// blip) removes each original once its copy is confirmed, so every
// message is either sent back and gone from the error queue, or not sent
// and still there; only a drop between a copy's confirm and the removal of
// its original leaves that one message in both, and Browse names it.
// Removing the originals only when the whole browse ends, a drop leaves
// every copy sent and every original in the error queue, for the next
// retry to send again.
func TestAnInterruptedRetryDuplicatesAtMostTheMessageItWasAt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dropAt      int // visit drops the connection at its message dropAt (from 0)
		afterReplay bool
		copies      int
		originals   []string
	}{
		{"before the third replay", 2, false, 2, []string{"m-2"}},
		{"between the second confirm and its removal", 1, true, 2, []string{"m-1", "m-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := amqptest.New(t, amqp.Config{})
			errorTopic, retryTopic := testenv.Name("errors_"), testenv.Name("charge_")
			for topic, group := range map[string]string{errorTopic: "errors", retryTopic: "billing"} {
				sub, err := tr.Subscriber(group, 1)
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Close() })
				require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
			}
			for i := range 3 {
				msg := message.NewMessage(fmt.Sprintf("m-%d", i), []byte("{}"))
				msg.Metadata.Set(metadata.ErrorTopic, retryTopic)
				msg.Metadata.Set(metadata.ErrorGroup, "billing")
				require.NoError(t, tr.Publisher().Publish(errorTopic, msg))
			}
			proxy, url := amqptest.NewProxy(t)
			q, err := amqpqueue.Open(url, errorTopic, "errors")
			require.NoError(t, err)
			t.Cleanup(func() { _ = q.Close() })

			visited := 0
			err = q.Browse(context.Background(), 10, func(msg *message.Message) (bool, error) {
				defer func() { visited++ }()
				if visited == tc.dropAt && !tc.afterReplay {
					proxy.Drop()
				}
				if _, err := q.Replay(context.Background(), msg); err != nil {
					return false, err
				}
				if visited == tc.dropAt {
					proxy.Drop()
				}
				return true, nil
			})
			require.Error(t, err)
			if tc.afterReplay {
				require.ErrorIs(t, err, amqpqueue.ErrNotRemoved)
				require.ErrorContains(t, err, "message m-1")
			} else {
				require.NotErrorIs(t, err, amqpqueue.ErrNotRemoved, "the second removal was answered by the third read")
			}

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
			errorQueue := amqp.QueueName(errorTopic, "errors")
			require.Eventually(t, func() bool { return ready(errorQueue) == len(tc.originals) }, 5*time.Second, 20*time.Millisecond,
				"originals left in the error queue")
			require.Equal(t, tc.copies, ready(amqp.QueueName(retryTopic, "billing")), "copies sent back")
			var left []string
			for range tc.originals {
				d, ok, err := ch.Get(errorQueue, false)
				require.NoError(t, err)
				require.True(t, ok)
				left = append(left, d.MessageId)
			}
			require.Equal(t, tc.originals, left)
		})
	}
}

package amqpqueue

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

// TestSendToAQueueGoneFails: a queue deleted between SendToQueue's check
// and its publish (here: never there) makes the send fail. RabbitMQ
// returns the mandatory message and then confirms it; a send that trusts
// the confirm alone succeeds, and a replay acks the error copy of a
// message that went nowhere.
func TestSendToAQueueGoneFails(t *testing.T) {
	conn, err := amqp091.Dial(testenv.RequireAMQP(t))
	require.NoError(t, err)
	q := &Queue{conn: conn}
	t.Cleanup(func() { _ = q.Close() })
	err = q.send(context.Background(), testenv.Name("gone_"), message.NewMessage("m1", nil))
	require.ErrorContains(t, err, "is gone: RabbitMQ returned the message")
}

// TestASendCutOffIsOutcomeUnknown: a send whose wait for the confirm is
// cut off (here the request ends right after the publish) says that the
// copy may or may not be in the queue, not that it failed: the caller
// keeps the original and tells the operator a retry may repeat it. The
// broker's answer can be in before the wait begins, and then the send
// says what it was (a queue that is gone); so the test sends until a wait
// was cut off, 20 times at most (one send of one failed a clean-clone CI
// run when the answer had won the race).
func TestASendCutOffIsOutcomeUnknown(t *testing.T) {
	conn, err := amqp091.Dial(testenv.RequireAMQP(t))
	require.NoError(t, err)
	q := &Queue{conn: conn}
	t.Cleanup(func() { _ = q.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // amqp091's publish ignores the context; the wait for the confirm does not
	for range 20 {
		err = q.send(ctx, testenv.Name("gone_"), message.NewMessage("m1", nil))
		if errors.Is(err, ErrOutcomeUnknown) {
			require.ErrorContains(t, err, "sent or not, unknown")
			return
		}
		require.ErrorContains(t, err, "is gone: RabbitMQ returned the message", "the answer was in before the wait: it is said")
	}
	t.Fatal("in 20 sends, the broker's answer always came before the cut-off wait: the check could not look")
}

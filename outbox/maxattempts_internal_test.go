package outbox

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metadata"
)

// TestTheRelayTriesAMessageExactlyMaxRelayAttemptsTimes: a message the
// transport keeps refusing is published to its topic MaxRelayAttempts
// times, no more and no fewer, and then its copy on the error topic says
// that many attempts. It caught the relay comparing the attempts with <=,
// which made one attempt more than configured and reported it.
func TestTheRelayTriesAMessageExactlyMaxRelayAttemptsTimes(t *testing.T) {
	dest := &refusesTopic{refused: "t"}
	p := &relayPublisher{cfg: Config{Logger: watermill.NopLogger{}, Destination: dest, MaxRelayAttempts: 3, ErrorTopic: "errors",
		outageReminder: time.Hour}, attempts: map[string]int{}}
	msg := message.NewMessage("m-1", []byte(`{}`))
	for i := range 2 {
		require.ErrorIs(t, p.publish("t", msg), errRefused, "attempt %d is retried", i+1)
		require.Empty(t, dest.moved, "moved to the error topic after %d attempts", i+1)
	}
	require.NoError(t, p.publish("t", msg), "the third attempt moves the message aside")
	require.Equal(t, 3, dest.tries, "publishes to the refusing topic")
	require.Len(t, dest.moved, 1)
	moved := dest.moved[0]
	require.Equal(t, "m-1", moved.UUID)
	require.Equal(t, "3", moved.Metadata.Get(metadata.ErrorAttempts))
	require.Equal(t, "t", moved.Metadata.Get(metadata.ErrorTopic))
	require.Contains(t, moved.Metadata.Get(metadata.ErrorReason), "3 times")
}

// refusesTopic is a destination that refuses every publish to the topic
// refused with a plain error (the broker's own refusal, not an outage) and
// keeps what is published to any other topic.
type refusesTopic struct {
	refused string
	tries   int
	moved   []*message.Message
}

func (d *refusesTopic) Publish(topic string, msgs ...*message.Message) error {
	if topic == d.refused {
		d.tries++
		return errors.New("amqp: the broker refused the message (basic.nack)")
	}
	d.moved = append(d.moved, msgs...)
	return nil
}

func (d *refusesTopic) Close() error { return nil }

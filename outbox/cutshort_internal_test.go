package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// TestAPublishCutShortByTheStopIsNotARefusal: a publish the relay's stop
// cut short (its context cancelled) is not counted against the message,
// even past MaxRelayAttempts, and is said as what it was, not as "the
// transport refused a message" at every clean stop with the outbox.
func TestAPublishCutShortByTheStopIsNotARefusal(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	dest := &cutShort{}
	p := &relayPublisher{cfg: Config{Logger: logs, Destination: dest, MaxRelayAttempts: 2, ErrorTopic: "errors",
		outageReminder: time.Hour}, attempts: map[string]int{}}
	for range 3 {
		require.ErrorIs(t, p.publish("orders", message.NewMessage("m-1", nil)), context.Canceled)
	}
	require.Equal(t, []string{"orders", "orders", "orders"}, dest.topics, "nothing moved to the error topic")
	var lines []string
	for _, entries := range logs.Captured() {
		for _, e := range entries {
			lines = append(lines, e.Msg)
		}
	}
	require.Len(t, lines, 1, "said once: %v", lines)
	require.Contains(t, lines[0], "cut short")
	require.NotContains(t, lines[0], "refused")
}

// cutShort is a destination whose every publish its caller's stop ended.
type cutShort struct{ topics []string }

func (d *cutShort) Publish(topic string, _ ...*message.Message) error {
	d.topics = append(d.topics, topic)
	return fmt.Errorf("amqp: publish: %w", context.Canceled)
}

func (d *cutShort) Close() error { return nil }

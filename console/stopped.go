package console

import (
	"errors"
	"fmt"

	"github.com/postroom/postroom/internal/amqpqueue"
)

// stoppedText says what a retry or delete cut off by err did: n messages
// taken, at the one it was at. On RabbitMQ (atOnce) each taken message
// left at once (but perhaps the last); on the SQL transport all rolled back.
func stoppedText(done string, n int, at string, atOnce bool, err error) string {
	if !atOnce {
		return fmt.Sprintf("stopped: nothing was %s (the action is one transaction, rolled back): %v", done, err)
	}
	text := ""
	if errors.Is(err, amqpqueue.ErrNotRemoved) && n > 0 {
		n--
		text = fmt.Sprintf("; message %s was %s but may still be in the error topic (a retry would then repeat it; a handler with an inbox skips a repeat)", at, done)
	}
	if errors.Is(err, amqpqueue.ErrOutcomeUnknown) {
		text += fmt.Sprintf("; message %s: sent or not, unknown (the wait for the broker's confirm was cut off): it stays in the error topic, "+
			"and a retry may repeat it (a handler with an inbox skips a repeat)", at)
	}
	return fmt.Sprintf("stopped: %d message(s) %s and removed from the error topic before the stop%s; the others stay in the error topic: %v",
		n, done, text, err)
}

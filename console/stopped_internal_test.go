package console

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqpqueue"
)

// TestAStoppedRetrySaysWhatItDid: the page of a retry cut off says how
// many messages were sent back and removed, and names the one it was at
// when that one may be in both places or its send is unknown: the
// broker's error alone says nothing of the copies the retry has sent.
func TestAStoppedRetrySaysWhatItDid(t *testing.T) {
	dropped := errors.New("Exception (504) Reason: \"channel/connection is not open\"")
	require.Equal(t, "stopped: 2 message(s) retried and removed from the error topic before the stop; the others stay in the error topic: "+dropped.Error(),
		stoppedText("retried", 2, "m-2", true, dropped))
	text := stoppedText("retried", 2, "m-1", true, fmt.Errorf("%w: amqpqueue: message m-1: %w", amqpqueue.ErrNotRemoved, dropped))
	require.Contains(t, text, "stopped: 1 message(s) retried and removed")
	require.Contains(t, text, "message m-1 was retried but may still be in the error topic")
	text = stoppedText("retried", 1, "m-1", true, fmt.Errorf("%w: cut off", amqpqueue.ErrOutcomeUnknown))
	require.Contains(t, text, "stopped: 1 message(s) retried and removed")
	require.Contains(t, text, "message m-1: sent or not, unknown")
	require.Contains(t, stoppedText("retried", 3, "m-3", false, dropped), "nothing was retried (the action is one transaction, rolled back)")
}

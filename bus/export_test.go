package bus

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
)

// MaxContentionRetries exports maxContentionRetries to the tests of
// package bus_test.
const MaxContentionRetries = maxContentionRetries

// ErrorAttempts returns the attempt count of a message from the error
// topic, for the tests of package bus_test.
func ErrorAttempts(msg *message.Message) int {
	n, _ := strconv.Atoi(msg.Metadata.Get(metadata.ErrorAttempts))
	return n
}

package bus

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// TestAnEmptyIDSaysWhereEachTransportTakesIt: a row a foreign producer
// inserted into the SQL transport's table with an empty uuid reaches the
// error topic with a reason that names the column to set, as it names
// RabbitMQ's property, not only the Watermill UUID and RabbitMQ's
// message_id.
func TestAnEmptyIDSaysWhereEachTransportTakesIt(t *testing.T) {
	err := checkReceived(message.NewMessage("", []byte(`{}`)))
	if err == nil {
		t.Fatal("a message without an ID was accepted")
	}
	if !IsUnrecoverable(err) {
		t.Fatalf("not unrecoverable: %v", err)
	}
	for _, want := range []string{"message ID is empty", "message_id property", "uuid column"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("reason %q does not say %q", err, want)
		}
	}
}

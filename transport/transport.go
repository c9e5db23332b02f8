package transport

import (
	"errors"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
)

// Transport publishes and subscribes messages. The subscriptions of one
// group to one topic compete for its messages; every group subscribed to
// a topic gets every message. The bus does not close it: its creator
// does, after the buses that use it. See docs/transports.md.
type Transport interface {
	// Publisher publishes to topics.
	Publisher() message.Publisher
	// Subscriber returns a subscriber for one queue group whose
	// subscriptions each hand out up to inFlight (≥ 1) unsettled messages.
	// When a subscription's context ends, the messages it handed out are
	// still settled by their Ack or Nack until the subscriber closes; a
	// message's own context ends with the subscription's.
	Subscriber(group string, inFlight int) (message.Subscriber, error)
	// Capabilities says what the transport offers and what it limits.
	Capabilities() Capabilities
	// Close releases the transport's connections.
	Close() error
}

// Capabilities is what a transport offers and what it limits, in one
// place. The zero value is an unbounded transport local to its process.
type Capabilities struct {
	// Sequential is true for a transport that hands out one message of a
	// group at a time, whatever its subscriptions and inFlight (the SQL
	// transport); the bus then commits each message of a batched handler
	// alone.
	Sequential bool
	// Reach names where the transport publishes, for one reaching beyond
	// its process (RabbitMQ: broker address and vhost; SQL: "sql"), the
	// same for two transports that deliver to the same subscribers. A
	// delayed delivery or an outbox row is published only by a bus of the
	// sender's reach ("": only by the sending endpoint's buses).
	Reach string
	// DeliveryLimit is how often the broker delivers a message before it
	// drops it (quorum queues' x-delivery-limit); 0: no limit. The bus
	// refuses a Config.MaxDeliveries that does not stay below it.
	DeliveryLimit int
	// CountsDeliveries is true for a transport whose every redelivery,
	// after a nack while its subscription runs or the end of a process,
	// carries metadata.DeliveryCount (quorum queues: the transport returns
	// such a message with a reject, which RabbitMQ counts): the poison-loop
	// guard counts nothing of its own. A delivery's DeliveryCount is a
	// floor of the guard's count on every transport.
	CountsDeliveries bool
	// MarksRedeliveries is true for a transport that marks with
	// metadata.Redelivered a delivery that may repeat one that ended with
	// its process, and counts or marks a redelivery after a nack: the bus
	// counts the marked ones in its database. Without either (in memory),
	// the bus counts the nacks it sees in its process.
	MarksRedeliveries bool
}

// DropControl removes from md what a transport says about a delivery
// (metadata.DeliveryCount, metadata.Redelivered, metadata.TransportError).
// A transport calls it on each message it receives, before setting its
// own, so a forged count or error cannot send a message to the error topic.
func DropControl(md message.Metadata) {
	for _, k := range []string{metadata.DeliveryCount, metadata.Redelivered, metadata.TransportError} {
		delete(md, k)
	}
}

// ErrNoRoute is wrapped by PublishMandatory's error when no queue takes the
// message (an endpoint that never started, a typo).
var ErrNoRoute = errors.New("transport: no queue takes the message")

// Mandatory is implemented by a transport that can tell when a published
// message reaches no queue: the bus sends commands through it, so Send
// fails instead of dropping them.
type Mandatory interface {
	// PublishMandatory publishes like Publisher().Publish, but fails with
	// an error wrapping ErrNoRoute when a message reached no queue.
	PublishMandatory(topic string, msgs ...*message.Message) error
}

// LoggerSetter is implemented by a transport that logs; the bus hands it
// its Config.Logger in New. Of several buses sharing a transport, the last
// one created sets it.
type LoggerSetter interface {
	SetLogger(*slog.Logger)
}

// FromNow is implemented by a subscriber on which a new group would read a
// topic's whole history (the SQL transport): the bus declares event topics
// with SubscribeInitializeFromNow, so a handler added later gets the
// events from then on; command topics keep what was sent before their
// endpoint first ran (SubscribeInitialize).
type FromNow interface {
	SubscribeInitializeFromNow(topic string) error
}

// ErrorQueueGroup is the group of the queue keeping the error topic's
// messages (on RabbitMQ "<error topic>_postroom_errors"), declared without
// a delivery limit, so an operator browsing it never makes the broker drop
// what it holds.
const ErrorQueueGroup = "postroom_errors"

// Connectivity is implemented by a transport holding broker connections:
// Connected is false while one reconnects (the gauge
// postroom_transport_connected).
type Connectivity interface {
	Connected() bool
}

// ErrUnreachable matches a publish that failed because the broker could
// not be reached, or the connection was lost mid-publish (the broker may
// have taken the message: a retry may publish it twice). It says nothing
// about the message: the outbox relay does not count it against it.
var ErrUnreachable = errors.New("transport: the broker is out of reach")

// Unreachable wraps err so that errors.Is(err, ErrUnreachable); its text
// is err's.
func Unreachable(err error) error { return unreachableError{err} }

type unreachableError struct{ err error }

func (e unreachableError) Error() string        { return e.err.Error() }
func (e unreachableError) Unwrap() error        { return e.err }
func (e unreachableError) Is(target error) bool { return target == ErrUnreachable }

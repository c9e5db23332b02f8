package transport

import (
	"errors"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
)

// Transport publishes and subscribes messages. The subscriptions of one
// group to one topic share its messages (competing consumers); every group
// subscribed to a topic gets every message published to it.
//
// The bus uses a transport it is given and does not close it: whoever
// created the transport closes it, after the buses that use it.
type Transport interface {
	// Publisher publishes to topics.
	Publisher() message.Publisher
	// Subscriber returns a subscriber for one queue group whose
	// subscriptions each hand out up to inFlight messages not settled yet
	// (at least 1; 1 is Watermill's contract, which its TestPubSub checks):
	// the next once one of them is acked or nacked. The bus subscribes a
	// handler once per topic, with inFlight its concurrency (times its
	// batch size), and Watermill's router runs each message handed out on
	// a goroutine of its own. When a subscription's context ends, the
	// messages it handed out and that are not settled yet are still
	// settled by their Ack or Nack until the subscriber closes (the bus
	// lets a handler running at a stop finish, bus.Config.StopTimeout); a
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
	// group at a time, however many subscriptions the group has (the SQL
	// transport: watermill-sql's subscriptions of one group take turns on
	// the group's offsets row), whatever the inFlight it was given. More
	// concurrency does not help there, and a batch would never hold more
	// than one message: the bus commits each message of a batched handler
	// alone.
	Sequential bool
	// Reach names where the transport publishes, for a transport whose
	// messages reach subscribers beyond its own process (RabbitMQ: the
	// broker's address and vhost; the SQL transport: the database's
	// tables); the same for two transports that deliver to the same
	// subscribers. A delayed delivery or an outbox row is published only
	// by a bus whose transport has the reach of the sender's ("": only by
	// the sending endpoint's buses), so that a service on another broker,
	// sharing the database, does not publish it where nobody listens.
	Reach string
	// DeliveryLimit is how often the broker delivers a message before it
	// drops it (RabbitMQ's quorum queues: x-delivery-limit, counting nacks
	// and closed channels); 0: no limit. A message the broker drops is lost
	// without a trace, so the bus refuses, at New, a
	// Config.MaxDeliveries that does not leave this limit above its own
	// guard.
	DeliveryLimit int
	// CountsDeliveries is true for a transport whose every redelivery,
	// after a nack or the end of a process, carries metadata.DeliveryCount
	// (RabbitMQ's quorum queues): the bus's poison-loop guard
	// (bus.Config.MaxDeliveries) counts nothing of its own.
	CountsDeliveries bool
	// MarksRedeliveries is true for a transport that marks a delivery which
	// may repeat one that ended with its process with metadata.Redelivered
	// (RabbitMQ's classic queues; the SQL transport's first read of a topic
	// in a process) and counts in metadata.DeliveryCount, or marks, a
	// redelivery after a nack: the bus counts the marked deliveries in
	// its database. A transport that does neither (in memory) redelivers
	// only after a nack in its process, which the bus counts there.
	MarksRedeliveries bool
}

// DropControl removes from md what a transport says about a delivery
// (metadata.DeliveryCount, metadata.Redelivered, metadata.TransportError).
// A transport calls it on each message it
// receives, before it sets its own: a producer that is not postroom, or a
// copy replayed from the error topic, may carry these keys, and a forged
// count or error would send the message to the error topic.
func DropControl(md message.Metadata) {
	for _, k := range []string{metadata.DeliveryCount, metadata.Redelivered, metadata.TransportError} {
		delete(md, k)
	}
}

// ErrNoRoute is wrapped by PublishMandatory's error when no queue takes the
// message (a command to an endpoint that never started, or a typo in its
// name).
var ErrNoRoute = errors.New("transport: no queue takes the message")

// Mandatory is implemented by a transport that can tell when a published
// message reaches no queue. The bus sends commands through it, so a
// command to a missing endpoint fails at Send instead of being dropped.
type Mandatory interface {
	// PublishMandatory publishes like Publisher().Publish, but fails with
	// an error wrapping ErrNoRoute when a message reached no queue.
	PublishMandatory(topic string, msgs ...*message.Message) error
}

// LoggerSetter is implemented by a transport that logs; the bus hands it
// its Config.Logger in New, so connects, reconnects, nacks and moved
// messages show in the application's log. A transport has one logger: of
// several buses sharing it, the last one created sets it.
type LoggerSetter interface {
	SetLogger(*slog.Logger)
}

// FromNow is implemented by a subscriber on which a new group would read a
// topic's whole history (the SQL transport, whose topics are tables): the
// bus declares its event topics with SubscribeInitializeFromNow, so a
// handler added later gets the events published from then on, as a new
// queue on a broker does. Command topics are declared with
// SubscribeInitialize and keep what was sent to an endpoint before it
// first ran.
type FromNow interface {
	SubscribeInitializeFromNow(topic string) error
}

// ErrorQueueGroup is the group of the queue that keeps the error topic's
// messages for an operator (on RabbitMQ "<error topic>_postroom_errors").
// A transport declares it without a broker-side delivery limit: an
// operator browsing it must never make the broker drop what it holds.
const ErrorQueueGroup = "postroom_errors"

// Connectivity is implemented by a transport that holds connections to a
// broker (RabbitMQ). Connected reports whether they are up: false while a
// subscriber's connection reconnects. The bus serves it as the gauge
// postroom_transport_connected.
type Connectivity interface {
	Connected() bool
}

// ErrUnreachable matches a publish that failed because the broker could
// not be reached at all (no connection could be made), or because the
// connection was lost while the message was in flight (the network, or
// the broker shutting down: it may have taken the message, and a retry
// may publish it twice): the failure says nothing about the message. The
// outbox relay does not count it against the message, so an outage does
// not bring a message closer to the error topic.
var ErrUnreachable = errors.New("transport: the broker is out of reach")

// Unreachable wraps err, a failure to reach the broker at all or a
// connection lost mid-publish (ErrUnreachable), so that errors.Is(err,
// ErrUnreachable); its text is err's.
func Unreachable(err error) error { return unreachableError{err} }

type unreachableError struct{ err error }

func (e unreachableError) Error() string        { return e.err.Error() }
func (e unreachableError) Unwrap() error        { return e.err }
func (e unreachableError) Is(target error) bool { return target == ErrUnreachable }

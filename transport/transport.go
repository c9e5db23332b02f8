package transport

import (
	"github.com/ThreeDotsLabs/watermill/message"
)

// Transport publishes and subscribes messages.
type Transport interface {
	// Publisher publishes to topics.
	Publisher() message.Publisher
	// Subscriber returns a subscriber for one queue group.
	Subscriber(group string) (message.Subscriber, error)
	// Competing reports whether several subscriptions of one group to one
	// topic share its messages. When false, each subscription gets every
	// message, so the bus subscribes once per handler.
	Competing() bool
	// Close releases the transport's connections.
	Close() error
}

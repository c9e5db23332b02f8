package transport

import (
	"errors"
	"io"
	"sync"

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

// Closers collects what a transport opens (its publisher, one subscriber per
// group) and closes them all, in order, once. Safe for concurrent use.
type Closers struct {
	mu   sync.Mutex
	list []io.Closer
}

// Add records c for Close.
func (cs *Closers) Add(c io.Closer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.list = append(cs.list, c)
}

// Close closes everything added, and returns every error.
func (cs *Closers) Close() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var errs []error
	for _, c := range cs.list {
		errs = append(errs, c.Close())
	}
	cs.list = nil
	return errors.Join(errs...)
}

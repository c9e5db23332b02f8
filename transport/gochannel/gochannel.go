package gochannel

import (
	"context"
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Config configures the in-memory transport. It has no settings yet: queues
// grow as needed, so a handler that sends to its own queue never blocks.
type Config struct{}

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("gochannel: transport closed")

// Transport is the in-memory transport: a queue per (group, topic), shared
// by the group's subscriptions.
type Transport struct {
	mu     sync.Mutex
	queues map[queueKey]*queue
	topics map[string][]*queue // the queues of the groups subscribed to each topic

	closed    chan struct{}
	closeOnce sync.Once
	subs      sync.WaitGroup
}

type queueKey struct{ group, topic string }

// New returns an in-memory transport.
func New(Config) *Transport {
	return &Transport{
		queues: map[queueKey]*queue{},
		topics: map[string][]*queue{},
		closed: make(chan struct{}),
	}
}

// Publisher returns the publisher.
func (t *Transport) Publisher() message.Publisher { return publisher{t} }

// Subscriber returns a subscriber of group: its subscriptions to a topic
// share the topic's messages.
func (t *Transport) Subscriber(group string) (message.Subscriber, error) {
	return &groupSubscriber{t: t, group: group}, nil
}

// Competing is true: subscriptions of one group share the topic's messages.
func (t *Transport) Competing() bool { return true }

// Close stops every subscription; messages not yet delivered are dropped.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	t.subs.Wait()
	return nil
}

// queue returns the queue of group for topic, creating it on first use.
func (t *Transport) queue(group, topic string) *queue {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := queueKey{group, topic}
	q, ok := t.queues[key]
	if !ok {
		q = &queue{ready: make(chan struct{}, 1)}
		t.queues[key] = q
		t.topics[topic] = append(t.topics[topic], q)
	}
	return q
}

type publisher struct{ t *Transport }

// Publish appends the messages to the queue of every group subscribed to
// topic; with none, they are dropped. It never blocks.
func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	select {
	case <-p.t.closed:
		return ErrClosed
	default:
	}
	p.t.mu.Lock()
	queues := p.t.topics[topic]
	p.t.mu.Unlock()
	for _, q := range queues {
		q.push(msgs)
	}
	return nil
}

func (publisher) Close() error { return nil }

// queue is an unbounded FIFO of messages with a wake-up signal.
type queue struct {
	mu    sync.Mutex
	items []*message.Message
	ready chan struct{} // holds a token while items may be waiting
}

func (q *queue) push(msgs []*message.Message) {
	q.mu.Lock()
	q.items = append(q.items, msgs...)
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop takes the first message, passing the signal on to the next waiting
// subscription when more are left.
func (q *queue) pop() (*message.Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, false
	}
	msg := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) > 0 {
		q.signal()
	}
	return msg, true
}

type groupSubscriber struct {
	t     *Transport
	group string
}

// Subscribe delivers the group's messages of topic, one at a time: the next
// comes once this one is acked; a nacked message is delivered again at once.
func (s *groupSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	q := s.t.queue(s.group, topic)
	out := make(chan *message.Message)
	s.t.subs.Add(1)
	go func() {
		defer s.t.subs.Done()
		defer close(out)
		for {
			if msg, ok := q.pop(); ok {
				if !deliver(ctx, s.t.closed, msg, out) {
					return
				}
				continue
			}
			select {
			case <-q.ready:
			case <-ctx.Done():
				return
			case <-s.t.closed:
				return
			}
		}
	}()
	return out, nil
}

// deliver hands a copy of msg to the subscription until it is acked; it
// reports false when the subscription or the transport closed first.
func deliver(ctx context.Context, closed <-chan struct{}, msg *message.Message, out chan<- *message.Message) bool {
	for {
		m := msg.Copy()
		m.SetContext(ctx)
		select {
		case out <- m:
		case <-ctx.Done():
			return false
		case <-closed:
			return false
		}
		select {
		case <-m.Acked():
			return true
		case <-m.Nacked():
		case <-ctx.Done():
			return false
		case <-closed:
			return false
		}
	}
}

// Close does nothing: subscriptions end with their context or the transport.
func (s *groupSubscriber) Close() error { return nil }

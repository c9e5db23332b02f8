package gochannel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport"
)

// Config configures the in-memory transport. It has no settings yet.
type Config struct{}

// ErrClosed is returned once the transport, or the publisher or subscriber
// called, is closed.
var ErrClosed = errors.New("gochannel: transport closed")

// Transport is the in-memory transport: a queue per (group, topic), shared
// by the group's subscriptions.
type Transport struct {
	mu     sync.Mutex
	queues map[queueKey]*queue
	topics map[string][]*queue // the queues of the groups that declared each topic

	closed    chan struct{} // closed by Close, under mu
	closeOnce sync.Once
	running   sync.WaitGroup // one per running queue dispatcher; Add under mu
}

type queueKey struct{ group, topic string }

var (
	_ transport.Transport          = (*Transport)(nil)
	_ transport.Mandatory          = (*Transport)(nil)
	_ message.SubscribeInitializer = (*groupSubscriber)(nil)
)

// New returns an in-memory transport.
func New(Config) *Transport {
	return &Transport{
		queues: map[queueKey]*queue{},
		topics: map[string][]*queue{},
		closed: make(chan struct{}),
	}
}

// Publisher returns a new publisher; closing it affects only itself.
func (t *Transport) Publisher() message.Publisher { return &publisher{t: t} }

// Subscriber returns a subscriber of group whose subscriptions each hold
// up to inFlight messages at once, sharing the group's queues.
func (t *Transport) Subscriber(group string, inFlight int) (message.Subscriber, error) {
	return &groupSubscriber{t: t, group: group, inFlight: max(inFlight, 1), subs: map[*subscription]struct{}{}}, nil
}

// Capabilities: in memory, in this process alone, unbounded.
func (t *Transport) Capabilities() transport.Capabilities { return transport.Capabilities{} }

// Close ends every subscription, cancelling the contexts of the messages
// held, and drops every queued message.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		close(t.closed)
		t.mu.Unlock()
	})
	t.running.Wait()
	return nil
}

func (t *Transport) isClosed() bool {
	select {
	case <-t.closed:
		return true
	default:
		return false
	}
}

// declare returns group's queue for topic, creating it on first use.
// Callers hold t.mu.
func (t *Transport) declare(group, topic string) *queue {
	key := queueKey{group, topic}
	q, ok := t.queues[key]
	if !ok {
		q = newQueue(t)
		t.queues[key] = q
		t.topics[topic] = append(t.topics[topic], q)
	}
	return q
}

// publish appends msgs to the queue of every group that declared topic and
// reports how many queues took them.
func (t *Transport) publish(topic string, msgs []*message.Message) (int, error) {
	t.mu.Lock()
	if t.isClosed() {
		t.mu.Unlock()
		return 0, ErrClosed
	}
	queues := t.topics[topic] // only ever appended to: the prefix read here stays valid
	t.mu.Unlock()
	for _, q := range queues {
		q.push(msgs)
	}
	return len(queues), nil
}

// PublishMandatory publishes like Publish, but fails with an error wrapping
// [transport.ErrNoRoute] when no group has declared topic.
func (t *Transport) PublishMandatory(topic string, msgs ...*message.Message) error {
	n, err := t.publish(topic, msgs)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("gochannel: no group has subscribed to topic %q (or called SubscribeInitialize for it): %w", topic, transport.ErrNoRoute)
	}
	return nil
}

type publisher struct {
	t      *Transport
	closed atomic.Bool
}

// Publish appends the messages to the queue of every group that declared
// topic; with none, they are dropped (use [Transport.PublishMandatory] to
// be told). It never blocks.
func (p *publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	_, err := p.t.publish(topic, msgs)
	return err
}

// Close refuses this publisher's later Publish calls.
func (p *publisher) Close() error {
	p.closed.Store(true)
	return nil
}

type groupSubscriber struct {
	t        *Transport
	group    string
	inFlight int

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

// SubscribeInitialize declares the group's queue for topic: messages
// published from now on are kept for the group.
func (s *groupSubscriber) SubscribeInitialize(topic string) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if s.t.isClosed() {
		return ErrClosed
	}
	s.t.declare(s.group, topic)
	return nil
}

// Subscribe declares the group's queue for topic and delivers its
// messages, up to inFlight at a time. The channel closes when ctx ends or
// the subscriber or transport closes, and the held messages' contexts are
// cancelled: after ctx ends their ack or nack still counts; after the
// subscriber closes they go back to the queue; after the transport
// closes they are dropped.
func (s *groupSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	sub := newSubscription(ctx, s.inFlight)
	s.t.mu.Lock()
	if s.t.isClosed() {
		s.t.mu.Unlock()
		sub.cancel()
		return nil, ErrClosed
	}
	q := s.t.declare(s.group, topic)
	q.add(sub)
	s.t.mu.Unlock()
	for old := range s.subs { // forget the subscriptions that ended and hold nothing
		select {
		case <-old.ended:
			if !old.q.holding(old) {
				delete(s.subs, old)
			}
		default:
		}
	}
	s.subs[sub] = struct{}{}
	return sub.out, nil
}

// Close ends the subscriber's subscriptions once their channels are
// closed; the messages they hold go back to the head of their queues.
func (s *groupSubscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	subs := make([]*subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
		select {
		case <-sub.closing: // an earlier Close
		default:
			close(sub.closing)
		}
		sub.cancel()
	}
	s.mu.Unlock()
	for _, sub := range subs {
		<-sub.ended
		sub.watchers.Wait() // what it held is back in the queue
	}
	return nil
}

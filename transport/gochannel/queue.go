package gochannel

import (
	"context"
	"reflect"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// queue is a group's unbounded FIFO for one topic. While it has
// subscriptions, one dispatcher goroutine offers the head message to every
// free subscription at once and gives it to the first that reads: a
// subscription whose reader stopped holds nothing.
type queue struct {
	t    *Transport
	wake chan struct{} // holds a token when the dispatcher has something new to look at

	mu      sync.Mutex
	items   []*message.Message // items[head:] are queued, oldest first
	head    int
	added   []*subscription // new subscriptions, not yet taken up by the dispatcher
	running bool            // a dispatcher goroutine runs
}

func newQueue(t *Transport) *queue {
	return &queue{t: t, wake: make(chan struct{}, 1)}
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push appends msgs; it never blocks.
func (q *queue) push(msgs []*message.Message) {
	q.mu.Lock()
	q.items = append(q.items, msgs...)
	q.mu.Unlock()
	q.signal()
}

// front returns the head message, or nil. Callers hold q.mu.
func (q *queue) front() *message.Message {
	if q.head < len(q.items) {
		return q.items[q.head]
	}
	return nil
}

// popFront removes the head message. Callers hold q.mu.
func (q *queue) popFront() {
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// pushFront puts a message taken back at the head, for the next free
// subscription. Callers hold q.mu.
func (q *queue) pushFront(m *message.Message) {
	if q.head > 0 {
		q.head--
		q.items[q.head] = m
		return
	}
	q.items = append(q.items, nil)
	copy(q.items[1:], q.items)
	q.items[0] = m
}

// add hands sub to the dispatcher, starting one if none runs. Callers hold
// q.t.mu, so Transport.Close cannot start waiting in between.
func (q *queue) add(sub *subscription) {
	q.mu.Lock()
	q.added = append(q.added, sub)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		q.t.running.Add(1)
		go q.dispatch()
		return
	}
	q.signal()
}

// subscription is one Subscribe call: an unbuffered channel and at most one
// message held (delivered, not yet acked or nacked).
type subscription struct {
	ctx    context.Context // ends with the caller's context or the subscriber's Close
	cancel context.CancelFunc
	out    chan *message.Message
	ended  chan struct{} // closed after out

	// Owned by the dispatcher.
	held  *delivery // delivered and not yet acked or nacked
	offer *delivery // the copy of the head offered while the subscription is free
}

// delivery is a copy of a queued message, made for one subscription, with
// the context that is cancelled once it is acked or nacked or the
// subscription ends.
type delivery struct {
	queued *message.Message
	msg    *message.Message
	cancel context.CancelFunc
}

func newSubscription(ctx context.Context) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	return &subscription{
		ctx:    ctx,
		cancel: cancel,
		out:    make(chan *message.Message),
		ended:  make(chan struct{}),
	}
}

// offering returns the copy of head offered to s, made once per head.
func (s *subscription) offering(head *message.Message) *delivery {
	if s.offer != nil && s.offer.queued == head {
		return s.offer
	}
	if s.offer != nil {
		s.offer.cancel()
	}
	msg := head.Copy()
	ctx, cancel := context.WithCancel(s.ctx)
	msg.SetContext(ctx)
	s.offer = &delivery{queued: head, msg: msg, cancel: cancel}
	return s.offer
}

// end closes the subscription's channel and cancels its context, and with
// it the context of the message it holds.
func (s *subscription) end() {
	s.cancel()
	close(s.out)
	close(s.ended)
}

type caseKind int

const (
	caseWake   caseKind = iota // something was pushed or subscribed
	caseClosed                 // the transport closed
	caseDone                   // a subscription's context ended
	caseAcked                  // a held message was acked
	caseNacked                 // a held message was nacked
	caseSent                   // a free subscription took the head
)

type selectCase struct {
	kind caseKind
	sub  *subscription
}

// dispatch serves the queue's subscriptions until none is left or the
// transport closes. It alone takes messages off the queue, puts them back
// and ends subscriptions, so a subscription's state needs no lock.
func (q *queue) dispatch() {
	defer q.t.running.Done()
	var (
		subs  []*subscription
		cases []reflect.SelectCase
		whats []selectCase
	)
	for {
		q.mu.Lock()
		subs = append(subs, q.added...)
		clear(q.added)
		q.added = q.added[:0]
		if q.t.isClosed() {
			q.running = false
			q.mu.Unlock()
			for _, s := range subs {
				s.end()
			}
			return
		}
		live := subs[:0]
		for _, s := range subs {
			if s.ctx.Err() == nil {
				live = append(live, s)
				continue
			}
			if s.held != nil && !acked(s.held.msg) { // the next subscription gets it
				q.pushFront(s.held.queued)
			}
			s.end()
		}
		clear(subs[len(live):])
		subs = live
		if len(subs) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		head := q.front()
		q.mu.Unlock()

		cases, whats = cases[:0], whats[:0]
		recv := func(ch any, what selectCase) {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			whats = append(whats, what)
		}
		recv(q.wake, selectCase{kind: caseWake})
		recv(q.t.closed, selectCase{kind: caseClosed})
		for _, s := range subs {
			recv(s.ctx.Done(), selectCase{caseDone, s})
			switch {
			case s.held != nil:
				recv(s.held.msg.Acked(), selectCase{caseAcked, s})
				recv(s.held.msg.Nacked(), selectCase{caseNacked, s})
			case head != nil:
				cases = append(cases, reflect.SelectCase{
					Dir:  reflect.SelectSend,
					Chan: reflect.ValueOf(s.out),
					Send: reflect.ValueOf(s.offering(head).msg),
				})
				whats = append(whats, selectCase{caseSent, s})
			}
		}
		chosen, _, _ := reflect.Select(cases)
		switch what := whats[chosen]; what.kind {
		case caseWake, caseClosed, caseDone:
			// handled at the top of the loop
		case caseAcked:
			what.sub.held.cancel()
			what.sub.held = nil
		case caseNacked:
			q.mu.Lock()
			q.pushFront(what.sub.held.queued)
			q.mu.Unlock()
			what.sub.held.cancel()
			what.sub.held = nil
		case caseSent:
			q.mu.Lock()
			q.popFront() // still head: only the dispatcher takes from or returns to the front
			q.mu.Unlock()
			what.sub.held, what.sub.offer = what.sub.offer, nil
		}
	}
}

// acked reports whether msg was acked (the dispatcher may not have seen it
// yet).
func acked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}

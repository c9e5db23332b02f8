package gochannel

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport"
)

// maxOffers is how many free subscriptions the dispatcher offers the head
// to at once; reofferAfter is when it looks again if none of them reads.
const (
	maxOffers    = 8
	reofferAfter = 10 * time.Millisecond
)

// queue is a group's unbounded FIFO for one topic. While it has
// subscriptions, one dispatcher goroutine offers the head to the free
// subscriptions that waited longest (up to maxOffers) and gives it to the
// first that reads; a watcher goroutine per held message waits for its
// ack or nack. The dispatcher's work per message does not grow with the
// number of subscriptions.
type queue struct {
	t    *Transport
	wake chan struct{} // holds a token when the dispatcher has something new to look at

	mu      sync.Mutex
	items   []*message.Message // items[head:] are queued, oldest first
	head    int
	subs    []*subscription // every subscription not yet ended
	free    []*subscription // those of subs holding fewer than inFlight, longest free first
	gone    int             // subscriptions ended since the dispatcher last looked
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

// remove takes m off the queue: the head, or a little behind it when
// nacked messages went back in front. Callers hold q.mu.
func (q *queue) remove(m *message.Message) {
	if q.front() == m {
		q.popFront()
		return
	}
	if i := slices.Index(q.items[q.head:], m); i >= 0 {
		q.items = slices.Delete(q.items, q.head+i, q.head+i+1)
	}
}

// pushFront puts a message back at the head. Callers hold q.mu.
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

// add hands sub to the dispatcher, starting one if none runs. Callers
// hold q.t.mu, so Transport.Close cannot start waiting in between.
func (q *queue) add(sub *subscription) {
	sub.q = q
	q.mu.Lock()
	q.subs = append(q.subs, sub)
	q.free = append(q.free, sub)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	context.AfterFunc(sub.ctx, func() { q.ending(sub) })
	if start {
		q.t.running.Add(1)
		go q.dispatch()
		return
	}
	q.signal()
}

// subscription is one Subscribe call: an unbuffered channel and at most
// inFlight messages held (delivered, not yet settled).
type subscription struct {
	ctx      context.Context // ends with the caller's context or the subscriber's Close
	cancel   context.CancelFunc
	closing  chan struct{} // closed by the subscriber's Close, before cancel
	out      chan *message.Message
	ended    chan struct{} // closed after out
	inFlight int           // how many it may hold at once
	q        *queue        // set by queue.add

	held     map[*delivery]struct{} // under queue.mu: delivered and not yet acked or nacked
	watchers sync.WaitGroup         // one per message held

	offer *delivery // dispatcher only: the head, offered while the subscription is free
}

// delivery is a subscription's copy of a queued message, with a context
// cancelled once it is settled or the subscription ends.
type delivery struct {
	queued *message.Message
	msg    *message.Message
	cancel context.CancelFunc
}

func newSubscription(ctx context.Context, inFlight int) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	return &subscription{
		ctx:      ctx,
		cancel:   cancel,
		closing:  make(chan struct{}),
		out:      make(chan *message.Message),
		ended:    make(chan struct{}),
		inFlight: max(inFlight, 1),
		held:     map[*delivery]struct{}{},
	}
}

// offering returns the copy of head offered to s, rewritten (nobody has
// received it) when the head changes.
func (s *subscription) offering(head *message.Message) *delivery {
	if s.offer == nil {
		ctx, cancel := context.WithCancel(s.ctx)
		msg := message.NewMessage(head.UUID, head.Payload)
		msg.SetContext(ctx)
		s.offer = &delivery{msg: msg, cancel: cancel}
	} else if s.offer.queued != head {
		s.offer.msg.UUID, s.offer.msg.Payload = head.UUID, head.Payload
		clear(s.offer.msg.Metadata)
	}
	if s.offer.queued != head {
		s.offer.queued = head
		for k, v := range head.Metadata {
			s.offer.msg.Metadata[k] = v
		}
		transport.DropControl(s.offer.msg.Metadata) // this transport says nothing of a delivery
	}
	return s.offer
}

// end closes the subscription's channel and cancels its context and its
// messages'.
func (s *subscription) end() {
	s.cancel()
	close(s.out)
	close(s.ended)
}

// ending tells the dispatcher that s's context ended, so it ends s. What s
// holds stays with its watchers, so a stopping caller may let it finish:
// given back at once, it would be handled again while its first run goes on.
func (q *queue) ending(s *subscription) {
	q.mu.Lock()
	q.gone++
	q.mu.Unlock()
	q.signal()
}

// watch settles d as it is acked or nacked, also after s's context ended,
// until the subscriber closes (giving it back) or the transport (dropping it).
func (q *queue) watch(s *subscription, d *delivery) {
	defer q.t.running.Done()
	defer s.watchers.Done()
	select {
	case <-d.msg.Acked():
		q.settle(s, d, false)
	case <-d.msg.Nacked():
		q.settle(s, d, true)
	case <-s.closing:
		q.settle(s, d, !acked(d.msg))
	case <-q.t.closed:
		d.cancel()
	}
}

// settle frees a place of s for the next message, unless its context
// ended; a nacked message goes back to the head.
func (q *queue) settle(s *subscription, d *delivery, nacked bool) {
	q.mu.Lock()
	full := len(s.held) >= s.inFlight
	delete(s.held, d)
	if full && s.ctx.Err() == nil { // an ended one is dropped (dropEnded), never offered again
		q.free = append(q.free, s)
	}
	if nacked {
		q.pushFront(d.queued)
	}
	q.mu.Unlock()
	d.cancel()
	q.signal()
}

// dispatch offers the head to free subscriptions until none is left or
// the transport closes. It alone takes messages off and ends subscriptions.
func (q *queue) dispatch() {
	defer q.t.running.Done()
	var (
		free  []*subscription
		cases []reflect.SelectCase
		// offeredSince is when the first maxOffers of q.free were first
		// offered the head unread (zero after a take), across wake-ups, so
		// readers that stopped move to the back after reofferAfter.
		offeredSince time.Time
	)
	for {
		q.mu.Lock()
		if q.t.isClosed() {
			subs := q.subs
			q.subs, q.free, q.running = nil, nil, false
			q.mu.Unlock()
			for _, s := range subs {
				s.end()
			}
			return
		}
		if q.gone > 0 {
			q.gone = 0
			q.dropEnded()
		}
		if len(q.subs) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		head := q.front()
		free = free[:0]
		if head != nil {
			// Any free one will do; offering to hundreds would cost a copy
			// and a select case each, per message.
			if len(q.free) <= maxOffers {
				offeredSince = time.Time{} // every free one is offered
			} else if offeredSince.IsZero() {
				offeredSince = time.Now()
			} else if time.Since(offeredSince) >= reofferAfter {
				q.rotateLocked(maxOffers) // they have stopped reading
				offeredSince = time.Now()
			}
			free = append(free, q.free[:min(len(q.free), maxOffers)]...)
		}
		q.mu.Unlock()

		switch len(free) {
		case 0:
			select {
			case <-q.wake:
			case <-q.t.closed:
			}
		case 1: // the common case under load, without reflect
			s := free[0]
			select {
			case s.out <- s.offering(head).msg:
				q.taken(s)
				offeredSince = time.Time{}
			case <-q.wake:
			case <-q.t.closed:
			}
		default:
			cases = append(cases[:0],
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.wake)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.t.closed)},
			)
			for _, s := range free {
				cases = append(cases, reflect.SelectCase{
					Dir:  reflect.SelectSend,
					Chan: reflect.ValueOf(s.out),
					Send: reflect.ValueOf(s.offering(head).msg),
				})
			}
			if !offeredSince.IsZero() {
				// More are free than offered: look again when rotation is due.
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv,
					Chan: reflect.ValueOf(time.After(reofferAfter - time.Since(offeredSince)))})
			}
			if chosen, _, _ := reflect.Select(cases); chosen >= 2 && chosen < 2+len(free) {
				q.taken(free[chosen-2])
				offeredSince = time.Time{}
			}
			clear(free)
		}
	}
}

// dropEnded ends the subscriptions whose context has ended; what one holds
// stays with its watchers (see ending). Callers hold q.mu.
func (q *queue) dropEnded() {
	live := q.subs[:0]
	for _, s := range q.subs {
		if s.ctx.Err() == nil {
			live = append(live, s)
			continue
		}
		s.end()
	}
	clear(q.subs[len(live):])
	q.subs = live
	free := q.free[:0]
	for _, s := range q.free {
		if s.ctx.Err() == nil {
			free = append(free, s)
		}
	}
	clear(q.free[len(free):])
	q.free = free
}

// rotateLocked moves the first n free subscriptions, offered and unread,
// to the back of the list. Callers hold q.mu.
func (q *queue) rotateLocked(n int) {
	n = min(n, len(q.free))
	offered := slices.Clone(q.free[:n])
	q.free = append(slices.Delete(q.free, 0, n), offered...)
}

// taken records that s received its offer of the head, and starts the
// watcher of its settle.
func (q *queue) taken(s *subscription) {
	d := s.offer
	s.offer = nil
	q.mu.Lock()
	q.remove(d.queued) // a nack may have put another in front meanwhile
	s.held[d] = struct{}{}
	if len(s.held) >= s.inFlight {
		if i := slices.Index(q.free, s); i >= 0 { // among the first maxOffers
			q.free = slices.Delete(q.free, i, i+1)
		}
	}
	s.watchers.Add(1)
	q.t.running.Add(1)
	q.mu.Unlock()
	go q.watch(s, d)
}

// holding reports whether s holds a message.
func (q *queue) holding(s *subscription) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(s.held) > 0
}

// acked reports whether msg was acked (the watcher may not have seen it yet).
func acked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}

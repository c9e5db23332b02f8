package bus

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// beginStop begins the bus's stop (again: nothing more): Watermill's
// errors are routine from now on (logsink.Sink.Stopping), and the
// handlers running have Config.StopTimeout left (the drain's cut).
func (b *Bus) beginStop() {
	b.wmSink.Stopping()
	b.drain.Stop()
}

// outliveStop gives msg a context that the bus's stop does not end until
// Config.StopTimeout has passed, so that a handler running when the stop
// begins can finish and its message be acked: NServiceBus and MassTransit
// let the messages in flight complete on stop too. The transport's
// context ends with the subscription at the stop; anything else that
// ends it (the SQL transport's ack deadline, which the copy keeps, a
// Middleware's cancel) ends the new one at once. Cancelled at the stop, a
// handler in flight would roll its work back to do it again, and a
// handler with Inbox.ExternalEffects in the middle of its call would be parked
// as "outcome unknown" at every deploy under load. The transports keep a
// message they handed out ackable after its subscription stopped (see
// transport.Transport). Call the returned function when the delivery is
// settled.
func (b *Bus) outliveStop(msg *message.Message) (done func()) {
	parent := msg.Context()
	detached := context.WithoutCancel(parent)
	ctx, cancel := context.WithCancel(detached)
	if deadline, ok := parent.Deadline(); ok { // the SQL transport's ack deadline holds through a stop
		ctx, cancel = context.WithDeadline(detached, deadline)
	}
	stopAfter := context.AfterFunc(parent, func() {
		if !b.isStopping() {
			cancel()
			return
		}
		context.AfterFunc(b.drain.Context(), cancel)
	})
	msg.SetContext(ctx)
	return func() {
		stopAfter()
		cancel()
	}
}

// drainWait bounds how long a subscriber's Close waits, after the drain
// ended (the handlers' contexts are cancelled), for them to return.
const drainWait = 10 * time.Second

// drainingSubscriber is a handler's subscriber as the router sees it.
// Watermill's router closes a handler's subscriber as soon as the router
// begins to close, which returns to the broker the messages the handlers
// still hold: their acks, when they finish within StopTimeout, would be
// lost, and the messages handled again. Its Close instead ends its
// subscriptions (the transport delivers nothing more, and keeps what it
// handed out ackable), waits until the bus's handlers hold no delivery
// (or the drain ended and drainWait passed), and only then closes the
// subscriber.
type drainingSubscriber struct {
	message.Subscriber
	b *Bus

	mu      sync.Mutex
	cancels []context.CancelFunc
	once    sync.Once
	err     error
}

func (b *Bus) draining(sub message.Subscriber) *drainingSubscriber {
	return &drainingSubscriber{Subscriber: sub, b: b}
}

// Subscribe subscribes with a context Close can end.
func (d *drainingSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.cancels = append(d.cancels, cancel)
	d.mu.Unlock()
	out, err := d.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		cancel()
	}
	return out, err
}

// Close ends the subscriptions, waits for the deliveries the handlers
// hold, and closes the subscriber (once; the router calls it once per
// handler).
func (d *drainingSubscriber) Close() error {
	d.mu.Lock()
	cancels := d.cancels
	d.cancels = nil
	d.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	d.b.beginStop()
	d.b.awaitHandling()
	d.once.Do(func() { d.err = d.Subscriber.Close() })
	return d.err
}

// awaitHandling waits, once the stop began, until the bus's handlers hold
// no delivery, or the drain ended and drainWait passed.
func (b *Bus) awaitHandling() {
	giveUp := make(chan struct{})
	stop := context.AfterFunc(b.drain.Context(), func() { time.AfterFunc(drainWait, func() { close(giveUp) }) })
	b.drain.Wait(giveUp)
	stop()
}

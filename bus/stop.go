package bus

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// beginStop marks the start of the bus's stop, once: Watermill's errors
// are routine from now on (logsink.Sink.Stopping), and the handlers
// running have Config.StopTimeout left (drain).
func (b *Bus) beginStop() {
	b.stopOnce.Do(func() {
		b.wmSink.Stopping()
		if b.cfg.StopTimeout < 0 {
			b.endDrain()
			return
		}
		time.AfterFunc(b.cfg.StopTimeout, b.endDrain)
	})
}

// outliveStop gives msg a context that the bus's stop does not end until
// Config.StopTimeout has passed, so that a handler running when the stop
// begins can finish and its message be acked: NServiceBus and MassTransit
// let the messages in flight complete on stop too. The transport's
// context ends with the subscription at the stop; anything else that
// ends it (the SQL transport's ack deadline, which the copy keeps, a
// Middleware's cancel) ends the new one at once. Before, a stop cancelled
// every handler in flight: its work rolled back and was done again, and a
// handler WithExternalEffects in the middle of its call was parked as
// "outcome unknown" at every deploy under load. The transports keep a
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
		context.AfterFunc(b.drain, cancel)
	})
	msg.SetContext(ctx)
	return func() {
		stopAfter()
		cancel()
	}
}

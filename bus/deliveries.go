package bus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
)

// unsettledLimit bounds the deliveries the bus remembers: a message that
// loops is nacked again within moments, so the oldest entries of a full
// table are messages another instance has since settled.
const unsettledLimit = 10_000

// unsettled counts, per handler group and message ID, the deliveries that
// ended without being settled (the broker got a nack and delivers again):
// the poison-loop guard's count in this process. A transport that counts
// deliveries itself (RabbitMQ's quorum queues) adds what happened in other
// processes and before a crash, through metadata.DeliveryCount.
type unsettled struct {
	// tracked is len(count), read without the lock: while no message is
	// unsettled (the usual case) a delivery takes no lock and builds no key.
	tracked atomic.Int64

	mu    sync.Mutex
	count map[string]unsettledCount
	order []unsettledSlot // insertion order, to forget the oldest when full
	seq   uint64
}

// unsettledCount is a message's count and the slot of order that holds it;
// stored: the bus counted one of its deliveries in the database as well
// (redeliveries), whose row goes when the message is settled.
type unsettledCount struct {
	n      int
	seq    uint64
	stored bool
}

type unsettledSlot struct {
	key string
	seq uint64
}

func unsettledKey(group, id string) string { return group + "\x00" + id }

// previous returns how many deliveries of msg to group ended unsettled
// before this one: the greater of this process's count and the transport's.
func (u *unsettled) previous(group string, msg *message.Message) int {
	n := 0
	if u.tracked.Load() > 0 {
		u.mu.Lock()
		n = u.count[unsettledKey(group, msg.UUID)].n
		u.mu.Unlock()
	}
	if v := msg.Metadata.Get(metadata.DeliveryCount); v == "" {
		return n
	} else if c, err := strconv.Atoi(v); err == nil && c > n {
		n = c
	}
	return n
}

// settle records the outcome of a delivery: nack (another delivery will
// come) or settled; stored marks a nacked delivery counted in the database.
// Settled, it reports whether a delivery of the message was so marked.
func (u *unsettled) settle(group, id string, nacked, stored bool) (wasStored bool) {
	if !nacked && u.tracked.Load() == 0 {
		return false
	}
	key := unsettledKey(group, id)
	u.mu.Lock()
	defer func() {
		u.tracked.Store(int64(len(u.count)))
		u.mu.Unlock()
	}()
	if !nacked {
		c, ok := u.count[key]
		delete(u.count, key) // its slot in order is skipped when reached
		return ok && c.stored
	}
	if u.count == nil {
		u.count = map[string]unsettledCount{}
	}
	c, ok := u.count[key]
	if !ok {
		u.seq++
		c.seq = u.seq
		u.order = append(u.order, unsettledSlot{key, c.seq})
		for len(u.order) > unsettledLimit {
			if old := u.order[0]; u.count[old.key].seq == old.seq { // not a slot of a later count of that key
				delete(u.count, old.key)
			}
			u.order = u.order[1:]
		}
		if len(u.order) > 2*len(u.count)+64 { // compact the settled slots
			live := u.order[:0]
			for _, slot := range u.order {
				if cur, ok := u.count[slot.key]; ok && cur.seq == slot.seq {
					live = append(live, slot)
				}
			}
			u.order = live
		}
	}
	c.n++
	c.stored = c.stored || stored
	u.count[key] = c
	return false
}

// guarded wraps a delivery with the poison-loop guard: a message delivered
// Config.MaxDeliveries times without being settled goes to the error topic
// on its next delivery, so that it stops blocking the messages behind it
// and using the broker and the consumer in a loop. While the error topic
// cannot take it, it is handled as usual. A redelivery the transport did
// not count is counted in the database first (redeliveries): so are the
// deliveries that ended with their process.
//
// Every message in flight at a crash comes back as a redelivery. Counted
// together, the innocent ones would reach MaxDeliveries with the one that
// kills its process and go to the error topic with it. So a redelivery is
// handled alone, not in a batch (WithBatch, HandleBatch), whose other
// members it would take down with it again; and a broker's redelivery
// counted in the database (RabbitMQ's classic queues) that came back
// before without being settled is handled one at a time in the bus,
// counted when its turn comes, so that a crash in its run is counted
// against it alone. The first redelivery after a
// crash, or after a connection was lost, runs as usual, side by side: an
// innocent message is counted at most twice.
func (b *Bus) guarded(handler, topic string, delivery message.HandlerFunc) func(*message.Message) error {
	group, consumer := b.group(handler), b.consumer(handler)
	return func(msg *message.Message) error {
		if msg.Metadata.Get(metadata.Redelivered) == metadata.RedeliveredYes && b.redeliveries.counts(msg) &&
			b.redeliveries.looped(msg.Context(), consumer, msg) {
			select {
			case b.suspects <- struct{}{}:
				defer func() { <-b.suspects }()
			case <-b.stopping:
				return errStopping
			case <-msg.Context().Done(): // its delivery ended (a lost connection): given back as at a stop
				return errStopping
			}
		}
		n, counted := b.previousDeliveries(handler, group, consumer, msg)
		if n >= b.cfg.MaxDeliveries {
			reason := fmt.Errorf("bus: delivered %d times without being handled (Config.MaxDeliveries %d): moved aside so that the messages behind it are handled", n, b.cfg.MaxDeliveries)
			if err := b.moveToErrorTopic(handler, topic, msg, 0, reason); err == nil {
				b.settledDelivery(handler, group, consumer, msg, counted, true)
				return nil
			}
		}
		if counted && n >= 2 {
			b.cfg.Logger.Warn("bus: a message came back again without being settled (nacked, or its process ended while handling it); it is handled alone, and goes to the error topic after Config.MaxDeliveries",
				"handler", handler, "message_id", msg.UUID, "deliveries", n, "max_deliveries", b.cfg.MaxDeliveries)
		}
		if n > 0 || msg.Metadata.Get(metadata.Redelivered) != "" { // as redelivery says, from the count in hand
			msg.SetContext(uow.Alone(msg.Context()))
		}
		_, err := delivery(msg)
		if err != nil {
			b.unsettled.settle(group, msg.UUID, true, counted)
		} else {
			b.settledDelivery(handler, group, consumer, msg, counted, false)
		}
		return err
	}
}

// redelivery reports whether msg may be a redelivery to group: its
// transport says so, or counts it, or this process saw it unsettled. Such
// a message is handled alone (guarded), and a batch does not wait for it.
func (b *Bus) redelivery(group string, msg *message.Message) bool {
	return msg.Metadata.Get(metadata.Redelivered) != "" || b.unsettled.previous(group, msg) > 0
}

// previousDeliveries returns how many deliveries of msg before this one
// were not settled, counting this one in the database first when its
// transport did not (counted: it was).
func (b *Bus) previousDeliveries(handler, group, consumer string, msg *message.Message) (n int, counted bool) {
	n = b.unsettled.previous(group, msg)
	if !b.redeliveries.counts(msg) {
		return n, false
	}
	c, err := b.redeliveries.count(msg.Context(), consumer, msg, b.cfg.Now())
	if err != nil {
		b.cfg.Logger.Warn("bus: the poison-loop guard could not count a redelivery; it counts this process's deliveries only",
			"handler", handler, "message_id", msg.UUID, "error", err)
		return n, false
	}
	return max(n, c), true
}

// settledDelivery records that msg was settled (handled, or moved aside)
// and forgets its count in the database if this process counted it there
// (now or at an earlier, nacked delivery), or moved it aside (a replay
// starts counting again; another process may have counted it).
func (b *Bus) settledDelivery(handler, group, consumer string, msg *message.Message, counted, moved bool) {
	wasStored := b.unsettled.settle(group, msg.UUID, false, false)
	if b.redeliveries == nil || !counted && !wasStored && !moved {
		return
	}
	// Also when the message's context ended with the settling (a stop).
	if err := b.redeliveries.forget(context.WithoutCancel(msg.Context()), consumer, msg.UUID); err != nil {
		// Kept, it counts on if the message comes again; cleanup purges it.
		b.cfg.Logger.Warn("bus: "+err.Error(), "handler", handler)
	}
}

package bus

import (
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// nackCountLimit bounds the messages nackCount remembers: a looping
// message is nacked again within moments, so the oldest are settled ones.
const nackCountLimit = 10_000

// nackCount counts, per handler group and message ID, the deliveries in
// this process that ended in a nack (counterFor).
type nackCount struct {
	// tracked is len(count), read without the lock: while no message is
	// nacked (the usual case) a delivery takes no lock and builds no key.
	tracked atomic.Int64

	mu    sync.Mutex
	count map[string]nackEntry
	order []nackSlot // insertion order, to forget the oldest when full
	seq   uint64
}

// nackEntry is a message's count and the slot of order that holds it.
type nackEntry struct {
	n   int
	seq uint64
}

type nackSlot struct {
	key string
	seq uint64
}

func nackKey(group, id string) string { return group + "\x00" + id }

func (c *nackCount) previous(msg *message.Message, group, _ string) (int, bool, func(), error) {
	n := 0
	if c.tracked.Load() > 0 {
		c.mu.Lock()
		n = c.count[nackKey(group, msg.UUID)].n
		c.mu.Unlock()
	}
	return n, false, func() {}, nil
}

// seen reports whether a delivery of id to group ended in a nack here.
func (c *nackCount) seen(group, id string) bool {
	if c.tracked.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.count[nackKey(group, id)]
	return ok
}

func (c *nackCount) ended(msg *message.Message, group, _ string, _, nacked, _ bool) error {
	if !nacked && c.tracked.Load() == 0 {
		return nil
	}
	key := nackKey(group, msg.UUID)
	c.mu.Lock()
	defer func() {
		c.tracked.Store(int64(len(c.count)))
		c.mu.Unlock()
	}()
	if !nacked {
		delete(c.count, key) // its slot in order is skipped when reached
		return nil
	}
	if c.count == nil {
		c.count = map[string]nackEntry{}
	}
	e, ok := c.count[key]
	if !ok {
		c.seq++
		e.seq = c.seq
		c.order = append(c.order, nackSlot{key, e.seq})
		for len(c.order) > nackCountLimit {
			if old := c.order[0]; c.count[old.key].seq == old.seq { // not a slot of a later count of that key
				delete(c.count, old.key)
			}
			c.order = c.order[1:]
		}
		if len(c.order) > 2*len(c.count)+64 { // compact the settled slots
			live := c.order[:0]
			for _, slot := range c.order {
				if cur, ok := c.count[slot.key]; ok && cur.seq == slot.seq {
					live = append(live, slot)
				}
			}
			c.order = live
		}
	}
	e.n++
	c.count[key] = e
	return nil
}

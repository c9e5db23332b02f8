package metrics

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Event is something that happened to one message in one handler.
type Event string

// The events postroom records.
const (
	Received  Event = "received"  // a delivery reached the handler's middleware chain
	Handled   Event = "handled"   // the handler ran and its unit of work committed
	Duplicate Event = "duplicate" // the inbox found the key and skipped the handler
	Stale     Event = "stale"     // the stale check found a newer version and skipped the handler
	Retried   Event = "retried"   // an attempt failed and was retried in process
	Failed    Event = "failed"    // the message was moved to the error topic
	Parked    Event = "parked"    // an external effect's outcome is unknown; the inbox parked the message
	Released  Event = "released"  // the handler said its external effect did not happen; the claim was released
	Reused    Event = "reused"    // a message ID came again with a different payload checksum
	Unrouted  Event = "unrouted"  // an event was published that no queue took
)

// Recorder receives events. Implementations must be safe for concurrent use.
type Recorder interface {
	Record(handler string, e Event)
}

// Discard is a Recorder that records nothing.
type Discard struct{}

// Record does nothing.
func (Discard) Record(string, Event) {}

// Counters is a Recorder that keeps a count per handler and event in
// memory, and the gauges (GaugeSetter) and running totals (Adder); Record
// is lock-free. It is a [prometheus.Collector]. The zero value is ready to
// use.
type Counters struct {
	n      sync.Map // eventKey → *atomic.Uint64
	mu     sync.Mutex
	gauges map[Gauge]float64
	counts map[Count]float64
}

type eventKey struct {
	handler string
	event   Event
}

// Record adds one to the count of e for handler.
func (c *Counters) Record(handler string, e Event) {
	k := eventKey{handler, e}
	n, ok := c.n.Load(k)
	if !ok {
		n, _ = c.n.LoadOrStore(k, new(atomic.Uint64))
	}
	n.(*atomic.Uint64).Add(1)
}

// Get returns the count of e for handler.
func (c *Counters) Get(handler string, e Event) uint64 {
	if n, ok := c.n.Load(eventKey{handler, e}); ok {
		return n.(*atomic.Uint64).Load()
	}
	return 0
}

// Total returns the count of e over all handlers.
func (c *Counters) Total(e Event) uint64 {
	var sum uint64
	for k, n := range c.n.Range {
		if k.(eventKey).event == e {
			sum += n.(*atomic.Uint64).Load()
		}
	}
	return sum
}

// snapshot returns every count by handler and event.
func (c *Counters) snapshot() map[string]map[Event]uint64 {
	all := map[string]map[Event]uint64{}
	for k, n := range c.n.Range {
		k := k.(eventKey)
		if all[k.handler] == nil {
			all[k.handler] = map[Event]uint64{}
		}
		all[k.handler][k.event] = n.(*atomic.Uint64).Load()
	}
	return all
}

// Handlers returns the names of the handlers that recorded anything, sorted.
func (c *Counters) Handlers() []string {
	all := c.snapshot()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

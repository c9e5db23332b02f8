package metrics

import (
	"sort"
	"sync"
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
// memory, and the gauges (GaugeSetter).
type Counters struct {
	mu     sync.Mutex
	n      map[string]map[Event]uint64
	gauges map[Gauge]float64
	counts map[Count]float64
}

// Record adds one to the count of e for handler.
func (c *Counters) Record(handler string, e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]map[Event]uint64{}
	}
	if c.n[handler] == nil {
		c.n[handler] = map[Event]uint64{}
	}
	c.n[handler][e]++
}

// Get returns the count of e for handler.
func (c *Counters) Get(handler string, e Event) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[handler][e]
}

// Total returns the count of e over all handlers.
func (c *Counters) Total(e Event) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum uint64
	for _, byEvent := range c.n {
		sum += byEvent[e]
	}
	return sum
}

// Handlers returns the names of the handlers that recorded anything, sorted.
func (c *Counters) Handlers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.n))
	for name := range c.n {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

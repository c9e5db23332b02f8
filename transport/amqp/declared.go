package amqp

import (
	"slices"
	"sync"
)

// declaredNames keeps the names of the exchanges and queues a transport
// has declared, each once, in the order first declared.
type declaredNames struct {
	mu        sync.Mutex
	seen      map[string]bool // "e:" or "q:" and the name
	exchanges []string
	queues    []string
}

// exchange records an exchange.
func (d *declaredNames) exchange(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.once("e:" + name) {
		d.exchanges = append(d.exchanges, name)
	}
}

// queue records a queue.
func (d *declaredNames) queue(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.once("q:" + name) {
		d.queues = append(d.queues, name)
	}
}

func (d *declaredNames) once(key string) bool {
	if d.seen[key] {
		return false
	}
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	d.seen[key] = true
	return true
}

func (d *declaredNames) names() (exchanges, queues []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.exchanges), slices.Clone(d.queues)
}

// Declared returns the names of the exchanges and queues the transport has
// declared since New, each once, in the order first declared (a name is
// recorded before its declaration, which may fail). The transport never
// deletes them: a tool with a throwaway topology deletes them itself.
func (t *Transport) Declared() (exchanges, queues []string) { return t.declared.names() }

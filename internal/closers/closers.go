// Package closers collects what a transport opens (its publisher, one
// subscriber per group) and closes it all, in order, once.
package closers

import (
	"errors"
	"io"
	"sync"
)

// Closers is safe for concurrent use; its zero value is empty.
type Closers struct {
	mu   sync.Mutex
	list []io.Closer
}

// Add records c for Close.
func (cs *Closers) Add(c io.Closer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.list = append(cs.list, c)
}

// Close closes everything added, and returns every error.
func (cs *Closers) Close() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var errs []error
	for _, c := range cs.list {
		errs = append(errs, c.Close())
	}
	cs.list = nil
	return errors.Join(errs...)
}

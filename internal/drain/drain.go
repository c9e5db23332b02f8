// Package drain holds a stop that lets what was handed out settle: it
// counts the hand-outs not yet settled (Add or TryAdd, then Done), begins
// the stop once (Stop; TryAdd refuses from then on), waits for them to
// settle (Wait), and cuts what is left, which runs on its Context.
package drain

import (
	"context"
	"sync"
	"time"
)

// Drain is a stop and what it waits for. Make one with New.
type Drain struct {
	grace    time.Duration
	stopping chan struct{}
	ctx      context.Context
	cut      context.CancelFunc

	mu      sync.Mutex
	stopped bool
	n       int
	idle    chan struct{} // closed when n falls to 0; nil while n is 0
}

// New returns a drain whose stop, once begun, is cut after grace (at once
// if grace is negative).
func New(grace time.Duration) *Drain {
	ctx, cut := context.WithCancel(context.Background())
	return &Drain{grace: grace, stopping: make(chan struct{}), ctx: ctx, cut: cut}
}

// Add counts a hand-out, even once the stop began.
func (d *Drain) Add() { d.add(true) }

// TryAdd counts a hand-out unless the stop began, and reports whether it
// did.
func (d *Drain) TryAdd() bool { return d.add(false) }

func (d *Drain) add(evenStopped bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped && !evenStopped {
		return false
	}
	if d.n == 0 {
		d.idle = make(chan struct{})
	}
	d.n++
	return true
}

// Done marks a counted hand-out settled.
func (d *Drain) Done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.n == 0 {
		close(d.idle)
		d.idle = nil
	}
}

// Stop begins the stop, once, and reports whether this call began it:
// Stopping closes, TryAdd refuses, and the cut is grace away.
func (d *Drain) Stop() bool {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return false
	}
	d.stopped = true
	close(d.stopping)
	d.mu.Unlock()
	if d.grace < 0 {
		d.cut()
	} else {
		time.AfterFunc(d.grace, d.cut)
	}
	return true
}

// Stopping is closed when the stop begins.
func (d *Drain) Stopping() <-chan struct{} { return d.stopping }

// Stopped reports whether the stop began.
func (d *Drain) Stopped() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopped
}

// Cut ends Context now, before the stop's grace has passed.
func (d *Drain) Cut() { d.cut() }

// Context ends at the cut.
func (d *Drain) Context() context.Context { return d.ctx }

// Wait returns once nothing counted is unsettled, or when give closes
// (nil: never).
func (d *Drain) Wait(give <-chan struct{}) {
	d.mu.Lock()
	idle := d.idle
	d.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-give:
	}
}

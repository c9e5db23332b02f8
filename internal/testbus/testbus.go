// Package testbus runs a bus for a test: until the test ends, failing the
// test if the bus stops before it runs or does not stop cleanly.
package testbus

import (
	"context"
	"testing"
	"time"

	"github.com/postroom/postroom/bus"
)

// Run runs b until the test ends and returns its context, once b handles
// messages. The test fails if b stops before it runs, does not run within
// 30 s, or Run or Close returns an error at the end.
func Run(t testing.TB, b *bus.Bus) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case <-b.Running():
	case err := <-done:
		cancel()
		t.Fatalf("the bus stopped before it ran: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the bus did not run within 30s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bus Run: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("bus Close: %v", err)
		}
	})
	return ctx
}

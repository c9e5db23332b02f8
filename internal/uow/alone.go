package uow

import "context"

type aloneKey struct{}

// Alone marks a message's context to be handled in a batch of its own, so
// a message that may have crashed a process (a redelivery) does not take
// others down with it.
func Alone(ctx context.Context) context.Context {
	return context.WithValue(ctx, aloneKey{}, true)
}

// isAlone reports whether ctx was marked with Alone.
func isAlone(ctx context.Context) bool {
	alone, _ := ctx.Value(aloneKey{}).(bool)
	return alone
}

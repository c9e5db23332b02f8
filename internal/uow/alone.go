package uow

import "context"

type aloneKey struct{}

// Alone marks a message's context so that the batched middleware, or a
// Collector, handles it in a batch of its own: a message that may have
// ended a process (a redelivery after a crash) is not to take the messages
// batched with it down again, and be counted with them. The open batch
// goes on filling with the others.
func Alone(ctx context.Context) context.Context {
	return context.WithValue(ctx, aloneKey{}, true)
}

// isAlone reports whether ctx was marked with Alone.
func isAlone(ctx context.Context) bool {
	alone, _ := ctx.Value(aloneKey{}).(bool)
	return alone
}

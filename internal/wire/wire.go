// Package wire names the metadata keys postroom sets for its own packages
// alone, which neither a producer nor a handler sets or reads.
package wire

// CommandTo is set on a command sent with bus.Send: the endpoint it is
// for. The outbox relay publishes such a message so that it fails when no
// queue takes it (and moves it to the error topic), instead of letting the
// broker drop it.
const CommandTo = "postroom-command-to"

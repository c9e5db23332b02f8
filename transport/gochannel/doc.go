// Package gochannel is the embedded, in-memory transport. Messages live only
// in the process: a message published to a topic nobody subscribes to is
// dropped, and messages in flight are lost when the process stops.
//
// Each (group, topic) has one unbounded queue, shared by the group's
// subscriptions (competing consumers), so a handler can run with a
// concurrency above one; every group subscribed to a topic gets every
// message. Publish appends to the queues and returns: it never blocks, so a
// handler that sends to its own queue cannot deadlock. A nacked message is
// delivered again at once to the same subscription.
//
// It replaced Watermill's GoChannel, which starts a goroutine per published
// message and needed a pump per group on top: two hand-offs per message
// fewer (docs/benchmarks.md).
package gochannel

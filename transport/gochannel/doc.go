// Package gochannel is the embedded, in-memory transport, on Watermill's
// GoChannel pub/sub. Messages live only in the process: a message published
// to a topic nobody subscribes to is dropped, and messages in flight are
// lost when the process stops.
//
// Queue groups are built on top: each (group, topic) has one GoChannel
// subscription whose messages are shared by the group's subscriptions
// (competing consumers), so a handler can run with a concurrency above one.
// A nacked message is delivered again at once to the same subscription.
package gochannel

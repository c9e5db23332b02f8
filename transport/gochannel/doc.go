// Package gochannel is the embedded, in-memory transport: the default of
// the bus, and the one for unit tests. A [Transport] is the broker; its
// publishers and subscribers are handles on it.
//
// # Queues
//
// Each (group, topic) has one unbounded FIFO queue, shared by the group's
// subscriptions (competing consumers), so a handler can run with a
// concurrency above one; every group that declared a topic gets every
// message published to it. A group declares a topic, like a durable queue
// bound on RabbitMQ, with SubscribeInitialize (the subscriber implements
// [message.SubscribeInitializer]) or with its first Subscribe; the queue then
// keeps what is published to the topic until a subscription of the group
// acks it, whether or not a subscription is running. The bus declares its
// handlers' topics and the error topic this way, so what is sent before Run
// waits for it.
//
// Publish appends to the queues and returns: it never blocks, so a handler
// that sends to its own queue cannot deadlock.
//
// # What is kept
//
//   - A message published to a declared topic, until acked.
//   - A nacked message: it goes back to the head of its queue, so the next
//     free subscription of the group (often the same one) gets it before
//     the messages behind it.
//   - A message held by a subscription that ends (its context is done, its
//     subscriber is closed) before acking: it goes back to the head of the
//     queue for the group's other subscriptions, and its context is
//     cancelled.
//
// A subscription holds up to its subscriber's inFlight messages at once
// (Transport.Subscriber) and gets the next once one of them is settled.
// The head of a queue goes to whichever free subscription reads it first: a
// subscription whose reader stopped reading holds nothing more.
// Delivery is at least once: a message is delivered again when acked after
// its subscription ended. One subscription gets a queue's messages in the
// order they were published; competing subscriptions handle them
// concurrently, so not in that order. The context of a delivered message
// derives from its subscription's and is cancelled on ack or nack.
//
// # What is dropped
//
//   - A message published to a topic no group has declared, like a message
//     published to a RabbitMQ exchange with no queue bound.
//     [Transport.PublishMandatory] ([transport.Mandatory]) fails with
//     [transport.ErrNoRoute] instead, so the bus can refuse a command to an
//     endpoint that has no queue.
//   - Everything queued or held when the Transport is closed or the process
//     stops: nothing is written anywhere.
//
// After Close, Publish, PublishMandatory, Subscribe and SubscribeInitialize
// fail with [ErrClosed]; so do a closed publisher's Publish and a closed
// subscriber's Subscribe. Closing a subscriber ends its subscriptions and
// closes their channels.
//
// Watermill's GoChannel does not fit: it starts a goroutine per published
// message, gives every subscription every message and would need a pump
// per group on top (docs/decisions.md).
package gochannel

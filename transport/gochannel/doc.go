// Package gochannel is the embedded, in-memory transport: the default of
// the bus, and the one for unit tests. A [Transport] is the broker; its
// publishers and subscribers are handles on it.
//
// # Queues
//
// Each (group, topic) has one unbounded FIFO queue, shared by the group's
// subscriptions (competing consumers); every group that declared a topic
// gets every message published to it. A group declares a topic, like a
// durable queue bound on RabbitMQ, with SubscribeInitialize
// ([message.SubscribeInitializer]) or its first Subscribe; the queue then
// keeps what is published to the topic until the group acks it, whether
// or not a subscription is running. Publish never blocks, so a handler
// that sends to its own queue cannot deadlock.
//
// # What is kept
//
//   - A message published to a declared topic, until acked.
//   - A nacked message, or one held by a subscription that ends: it goes
//     back to the head of its queue (the ended one's context is cancelled).
//
// A subscription holds up to its subscriber's inFlight messages at once
// (Transport.Subscriber). Delivery is at least once: a message acked after
// its subscription ended is delivered again. One subscription gets a
// queue's messages in publish order; competing ones handle them
// concurrently. A delivered message's context derives from its
// subscription's and is cancelled on ack or nack.
//
// # What is dropped
//
//   - A message published to a topic no group has declared;
//     [Transport.PublishMandatory] fails with [transport.ErrNoRoute] instead.
//   - Everything queued or held when the Transport is closed or the process
//     stops.
//
// After Close, every call fails with [ErrClosed], as do a closed
// publisher's Publish and a closed subscriber's Subscribe. Watermill's
// GoChannel does not fit: see docs/decisions.md.
package gochannel

// Package amqp is the RabbitMQ transport: watermill-amqp with durable
// fanout exchanges (one per topic), a durable queue per topic and group,
// persistent messages and a prefetch of one. Several subscriptions of one
// group compete for the queue's messages, in one process or many.
// watermill-amqp reconnects after the connection drops.
//
// A nack makes RabbitMQ redeliver at once, so the bus retries in process
// with backoff and moves a message that keeps failing to the error topic.
package amqp

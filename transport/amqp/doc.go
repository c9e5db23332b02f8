// Package amqp is the RabbitMQ transport, on amqp091 with watermill-amqp's
// durable pub/sub topology: a durable fanout exchange per topic (see
// [ExchangeName]), a durable queue per topic and group (see [QueueName])
// and persistent messages. Subscriptions of one group compete for the
// queue's messages. Publisher and subscriber reconnect after the
// connection drops, and a closing subscriber cancels all its consumers
// before it returns any message, so a stop returns each message it holds
// once. docs/transports-amqp-notes.md has the details.
//
// A nack makes RabbitMQ redeliver at once, so the bus retries in process
// with backoff and moves a message that keeps failing to the error topic.
//
// # Messages from other producers
//
// [Marshaler] reads any message a plain AMQP client publishes and never
// fails (a nacked unreadable message would be redelivered forever). Each
// header becomes a string (the table in docs/transports-amqp-notes.md); the content_type,
// correlation_id and type properties become [MetadataContentType],
// [MetadataCorrelationID] and [MetadataType] unless a header of that name
// is present. The message ID is the _watermill_message_uuid header if not
// empty, else the message_id property. A message with neither, or with a
// header that cannot be converted, is delivered with
// [metadata.TransportError] set to the reason (for no ID, [ErrorNoID]);
// the bus moves it to the error topic.
//
// # Commands and events
//
// [Transport.Publisher] publishes without the mandatory flag: RabbitMQ
// drops an event nobody subscribes to, which is not an error.
// [Transport.PublishMandatory] fails with an error wrapping
// [transport.ErrNoRoute] when no queue is bound to the topic's exchange.
//
// A publish fails with an error wrapping [transport.ErrUnreachable] when
// no connection could be made, or its connection was lost before the
// broker confirmed (the broker may have taken the message); the outbox's
// relay does not count such an attempt. A channel or connection the broker
// closed on another error is a refusal.
//
// # Queues
//
// [Config.QueueType] chooses classic (the default) or quorum queues, which
// get x-delivery-limit [Config.DeliveryLimit]. [Config.Prefetch] is the
// basic.qos prefetch count, raised to a subscription's inFlight.
//
// Quorum queues count unacked deliveries (a crash included) in
// x-delivery-count, which [Marshaler.Unmarshal] moves to
// [metadata.DeliveryCount]; on classic queues it passes the redelivered
// flag on as [metadata.Redelivered] and the bus (with bus.Config.DB)
// counts it in its database. Either way the bus's poison-loop guard
// (bus.Config.MaxDeliveries) moves a message that keeps killing its
// consumer to the error topic.
//
// # Logging
//
// [Config.Logger] and [Transport.SetLogger] receive the transport's logs:
// connects and reconnects (info; lost connections and failed reconnects at
// warn), nacks and messages marked with [metadata.TransportError] (warn).
package amqp

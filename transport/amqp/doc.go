// Package amqp is the RabbitMQ transport, on amqp091 with watermill-amqp's
// durable pub/sub topology: durable fanout exchanges (one per topic, see
// [ExchangeName]), a durable queue per topic and group (see [QueueName])
// and persistent messages. Several subscriptions of one group compete for
// the queue's messages, in one process or many. The publisher and the
// subscriber are postroom's own: both reconnect after the connection
// drops, and a subscriber that closes cancels all its consumers before it
// returns any message to the queue, so a stop returns each message it
// holds once (see docs/transports-amqp-notes.md).
//
// A nack makes RabbitMQ redeliver at once, so the bus retries in process
// with backoff and moves a message that keeps failing to the error topic.
//
// # Messages from other producers
//
// [Marshaler] reads any message a plain AMQP client publishes and never
// fails (a subscriber that nacks a message it cannot read, as
// watermill-amqp's does, has RabbitMQ redeliver it at once, forever). Every header becomes a string by
// the rules of [HeaderString]: integers in decimal, booleans true/false,
// floats with strconv 'g', decimals in plain notation, timestamps RFC 3339
// UTC, byte arrays as text if valid UTF-8 else base64, tables and arrays
// as JSON. The content_type, correlation_id and type properties become
// [MetadataContentType], [MetadataCorrelationID] and [MetadataType] unless
// a header of that name is present.
//
// The message ID is the _watermill_message_uuid header if it is not empty,
// else the message_id property. A message with neither, or with a header
// that cannot be converted, is delivered with [metadata.TransportError]
// set to the reason (for no ID, [ErrorNoID]); the bus moves it to the
// error topic. Marshal writes what watermill-amqp's DefaultMarshaler
// writes, plus the message_id property.
//
// # Commands and events
//
// [Transport.Publisher] publishes without the mandatory flag: an event
// nobody subscribes to is dropped by RabbitMQ, which is not an error.
// [Transport.PublishMandatory] publishes with mandatory=true on a channel
// in confirm mode and fails with an error wrapping [transport.ErrNoRoute]
// when no queue is bound to the topic's exchange.
//
// A publish fails with an error wrapping [transport.ErrUnreachable] when
// no connection could be made, or when its connection was lost before the
// broker confirmed (the network, a missed heartbeat, the broker shutting
// down: 320 CONNECTION_FORCED); the broker may have taken the message. The
// outbox's relay does not count such an attempt against the message. A
// channel or connection the broker closed on another error is a refusal.
//
// # Queues
//
// [Config.QueueType] chooses classic (the default) or quorum queues;
// quorum queues get x-delivery-limit [Config.DeliveryLimit] (default 20),
// after which RabbitMQ drops a message that keeps coming back. An existing
// queue keeps its type: RabbitMQ refuses to redeclare it with another.
// [Config.Prefetch] is the basic.qos prefetch count (default 1), raised to
// a subscription's inFlight ([Transport.Subscriber]) where that is higher.
//
// Quorum queues count the earlier deliveries of a message that were not
// acked, a crash of the consumer included, in the x-delivery-count
// header: [Marshaler.Unmarshal] moves it to [metadata.DeliveryCount], so
// the bus's poison-loop guard (bus.Config.MaxDeliveries, default 10)
// moves a message that keeps killing its consumer to the error topic
// before the broker's delivery limit drops it. Classic queues do not
// count, but mark a delivery redelivered: [Marshaler.Unmarshal] passes the
// flag on as [metadata.Redelivered], and the bus (with bus.Config.DB)
// counts each such delivery in its database before handling it, so the
// guard moves a message that keeps killing its consumer there too.
//
// # Logging
//
// [Config.Logger] and [Transport.SetLogger] receive the transport's logs:
// connects and reconnects (info; lost connections and failed reconnects
// at warn), nacks (warn, with the message ID) and messages marked with
// [metadata.TransportError] (warn, with the reason).
package amqp

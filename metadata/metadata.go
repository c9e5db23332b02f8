package metadata

// Keys of the metadata postroom sets on every message it sends.
const (
	// MessageID is the message's ID, a time-ordered UUIDv7; it equals the
	// Watermill UUID of the message.
	MessageID = "postroom-message-id"
	// MessageType is the stable name of the payload's type.
	MessageType = "postroom-message-type"
	// SentAt is when the message was sent, RFC 3339 with nanoseconds.
	SentAt = "postroom-sent-at"
	// SourceEndpoint is the endpoint that sent the message.
	SourceEndpoint = "postroom-source-endpoint"
	// CorrelationID is the ID of the conversation the message belongs to.
	CorrelationID = "postroom-correlation-id"
	// CausationID is the ID of the message whose handler sent this one.
	CausationID = "postroom-causation-id"
	// EntityID identifies the entity a versioned update is about.
	EntityID = "postroom-entity-id"
	// Version is the version of a versioned update, RFC 3339 with nanoseconds.
	Version = "postroom-version"
)

// Keys set on a message moved to the error topic.
const (
	// ErrorReason is the error that made the last attempt fail.
	ErrorReason = "postroom-error-reason"
	// ErrorHandler is the handler that failed.
	ErrorHandler = "postroom-error-handler"
	// ErrorAttempts is how many attempts were made.
	ErrorAttempts = "postroom-error-attempts"
	// ErrorTopic is the topic the message was received from.
	ErrorTopic = "postroom-error-topic"
	// ErrorAt is when the message was moved, RFC 3339.
	ErrorAt = "postroom-error-at"
	// ErrorDroppedMetadata names the metadata values left out of a failed
	// message the error topic refused whole (RabbitMQ's frame_max):
	// "key (N bytes), …", largest first.
	ErrorDroppedMetadata = "postroom-error-dropped-metadata"
	// ErrorGroup is the subscriber group (queue) of the handler that
	// failed: a replay goes back to it alone.
	ErrorGroup = "postroom-error-group"
	// DelayedRetries is how many delayed retries a message has had (see
	// bus.Config.DelayedRetries); set on its delayed copies and on the
	// error topic.
	DelayedRetries = "postroom-delayed-retries"
)

// Replayed is set on a message replayed from the error topic: when it had
// been moved there, RFC 3339.
const Replayed = "postroom-replayed"

// TransportError is set by a transport on a message it could not read in
// full (a header it cannot convert, no message ID): the bus moves it to
// the error topic with this reason instead of handling it.
const TransportError = "postroom-transport-error"

// UnreadMetadata keeps, as text, metadata a transport could not read (the
// SQL transport: not a JSON object), for the error topic's copy.
const UnreadMetadata = "postroom-unread-metadata"

// DeliveryCount is set by a transport that counts deliveries (RabbitMQ's
// quorum queues): the earlier unsettled deliveries, which the bus's
// poison-loop guard (bus.Config.MaxDeliveries) adds to its own count.
const DeliveryCount = "postroom-delivery-count"

// Redelivered is set by a transport without DeliveryCount on a delivery
// that may repeat one that ended with its process: RedeliveredYes for a
// broker's redelivered flag (RabbitMQ classic queues), RedeliveredFirstRead
// on a process's first message of a topic (the SQL transport, which reads
// in order) and on each run of a delayed retry. The bus counts such
// deliveries in postroom_deliveries, so a message that kills its process
// each time still reaches the error topic.
const Redelivered = "postroom-redelivered"

// Values of Redelivered.
const (
	RedeliveredYes       = "true"
	RedeliveredFirstRead = "first-read"
)

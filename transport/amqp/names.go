package amqp

import "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

// QueueName is the queue a subscriber of group reads topic from:
// "<topic>_<group>". Subscriber names its queues with it.
func QueueName(topic, group string) string {
	return amqp.GenerateQueueNameTopicNameWithSuffix(group)(topic)
}

// ExchangeName is the exchange a topic is published to (a durable fanout
// exchange of the topic's name).
func ExchangeName(topic string) string {
	return amqp.GenerateExchangeNameTopicName(topic)
}

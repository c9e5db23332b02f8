// Package transport is the seam between the bus and a broker.
//
// A [Transport] gives one publisher and a subscriber per queue group. Every
// group subscribed to a topic gets every message published to it; the
// subscriptions within one group share its messages (competing consumers)
// where the transport supports it. Three implementations:
//
//   - [github.com/postroom/postroom/transport/gochannel]: in memory, the
//     embedded default and the one for unit tests;
//   - [github.com/postroom/postroom/transport/sql]: watermill-sql on
//     PostgreSQL or MySQL/MariaDB, for a database-only setup;
//   - [github.com/postroom/postroom/transport/amqp]: RabbitMQ with durable
//     queues, for production.
//
// This package imports no middleware.
package transport

// Package bench measures postroom against the database's own ceiling, the
// naive way and Watermill's in-memory Deduplicator, side by side in one run
// on PostgreSQL; on RabbitMQ, against a hand-rolled amqp091 + pgx consumer;
// batched commits against one transaction per message; and prints the
// ratios. cmd/postroom-bench (in this bench module) runs it.
package bench

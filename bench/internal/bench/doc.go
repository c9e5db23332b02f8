// Package bench measures postroom against the database's own ceiling, the
// naive way and Watermill's in-memory Deduplicator, side by side in one run
// on PostgreSQL, and prints the ratios. cmd/postroom-bench (in this bench
// module) runs it.
package bench

// Package sql is the database-only transport: watermill-sql on PostgreSQL
// or MySQL/MariaDB, one table per topic and an offsets table per topic with
// a row per group. Subscriptions of one group take turns (the offsets row
// is locked while a message is handled), so they compete safely.
//
// watermill-sql commits the subscriber's own transaction even after a nack;
// postroom never puts business writes in it: handlers write through their
// unit of work.
package sql

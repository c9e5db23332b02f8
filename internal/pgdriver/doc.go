// Package pgdriver is pgx's database/sql driver with one change: a
// transaction's BEGIN goes out with its first statement, in one round trip
// (pgx's pipeline), so a message with the inbox costs three round trips
// instead of four. Everything above the driver is unchanged. store.Open
// opens PostgreSQL through it; a *gorm.DB opened otherwise works too, with
// one round trip more per transaction.
package pgdriver

// Package pgdriver is pgx's database/sql driver with one change: a
// transaction's BEGIN is not sent on its own but with the transaction's
// first statement, in one round trip (pgx's pipeline). database/sql's
// BeginTx otherwise waits for BEGIN's answer before the first statement
// goes out. A unit of work whose first statement is the inbox's claim or
// the stale check then costs three round trips per message (BEGIN with the
// claim, the handler's write, COMMIT) instead of four.
//
// Everything above the driver is unchanged: transactions are *sql.Tx, with
// database/sql's rollback when their context ends, prepared statements and
// gorm's sessions. store.Open opens PostgreSQL through it; a *gorm.DB
// opened otherwise works too, with one round trip more per transaction.
package pgdriver

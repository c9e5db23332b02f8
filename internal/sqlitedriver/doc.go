// Package sqlitedriver opens SQLite through glebarez/go-sqlite (pure Go)
// with one fix: a transaction whose COMMIT fails ends there.
//
// SQLite keeps a transaction open when its COMMIT fails (a deferred
// foreign key still violated, say), while database/sql takes the
// transaction as ended and hands the connection out again: the next
// BEGIN on it fails ("cannot start a transaction within a transaction"),
// and what else runs on it runs inside the failed transaction, which sees
// the failed message's writes. mattn/go-sqlite3 rolls back after a COMMIT
// that failed; glebarez/go-sqlite (v1.21.2) does not. Here every failed
// COMMIT is followed by a ROLLBACK on its connection, and a connection the
// ROLLBACK cannot clean is closed (for an in-memory database, its only
// connection: the database with it).
package sqlitedriver

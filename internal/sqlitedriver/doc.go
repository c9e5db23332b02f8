// Package sqlitedriver opens SQLite through glebarez/go-sqlite (pure Go)
// with one fix: a transaction whose COMMIT fails ends there.
//
// SQLite keeps a transaction open when its COMMIT fails, while
// database/sql hands the connection out again: what runs on it next runs
// inside the failed transaction. glebarez/go-sqlite (v1.21.2), unlike
// mattn/go-sqlite3, does not roll back; here every failed COMMIT is
// followed by a ROLLBACK, and a connection it cannot clean is closed.
package sqlitedriver

package dialect

import (
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Contention reports whether err is, or was caused by, the database ending
// a statement or a transaction because another transaction held what it
// needed: a deadlock (PostgreSQL 40P01, MySQL/MariaDB 1213), a
// serialization failure (PostgreSQL 40001) or a lock wait timeout
// (MySQL/MariaDB 1205). Such a failure says nothing about the message: the
// same work succeeds once the other transaction has ended, which is what
// the server's message says ("try restarting transaction"). SQLite has no
// deadlocks: a writer waits for the other ("database is locked", see
// Transient).
//
// Every error in err's chain is looked at, not only the first database
// error: on MySQL/MariaDB a deadlock ends the whole transaction, and the
// rollback to a savepoint that follows fails with its own error (1305,
// no such savepoint), which a batch reports with the deadlock behind it.
func Contention(err error) bool {
	if err == nil {
		return false
	}
	switch e := err.(type) {
	case *pgconn.PgError:
		return e.Code == "40P01" || e.Code == "40001"
	case *mysql.MySQLError:
		return e.Number == 1213 || e.Number == 1205
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return Contention(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if Contention(e) {
				return true
			}
		}
	}
	return false
}

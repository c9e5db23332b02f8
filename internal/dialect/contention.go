package dialect

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Contention reports whether err is the database ending a statement or a
// transaction because another transaction held what it needed: a
// deadlock (PostgreSQL 40P01, MySQL/MariaDB 1213), a serialization
// failure (PostgreSQL 40001) or a lock wait timeout (MySQL/MariaDB 1205).
// Such a failure says nothing about the message: the same work succeeds
// once the other transaction has ended, which is what the server's
// message says ("try restarting transaction"). SQLite has no deadlocks:
// a writer waits for the other ("database is locked", see Transient).
func Contention(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40P01" || pg.Code == "40001"
	}
	return MySQLError(err, 1213, 1205)
}

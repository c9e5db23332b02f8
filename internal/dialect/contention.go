package dialect

import (
	"context"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
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

// ContendedAttempts is how many times ExecContended runs a statement.
const ContendedAttempts = 5

// ExecContended runs one statement on db, again when it lost to
// contention (a deadlock, a serialization failure, a lock wait timeout),
// up to ContendedAttempts runs in all with a growing pause, and returns the rows it changed. A single
// statement that lost changed nothing, so running it again is safe.
func ExecContended(ctx context.Context, db *gorm.DB, query string, args ...any) (int64, error) {
	var err error
	for attempt := 1; attempt <= ContendedAttempts; attempt++ {
		res := db.WithContext(ctx).Exec(query, args...)
		if err = res.Error; err == nil {
			return res.RowsAffected, nil
		}
		if !Contention(err) {
			return 0, err
		}
		select {
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		case <-ctx.Done():
			return 0, err
		}
	}
	return 0, err
}

package dialect

import (
	"context"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// Contention reports whether err, or an error in its chain, is the
// database ending work because another transaction held what it needed: a
// deadlock (PostgreSQL 40P01, MySQL/MariaDB 1213), a serialization failure
// (40001) or a lock wait timeout (1205). The same work succeeds once the
// other transaction ends. SQLite waits instead (see Transient).
//
// The whole chain is looked at: on MySQL/MariaDB a deadlock ends the
// transaction, and the savepoint rollback after it fails with its own
// error (1305), which a batch reports with the deadlock behind it.
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

// ExecContended runs a statement, again after a growing pause while it
// loses to Contention (safe: it changed nothing), and returns rows changed.
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

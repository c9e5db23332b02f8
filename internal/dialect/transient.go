package dialect

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err is a failure to reach the database, which
// the same statement may not have a moment later: the connection refused,
// cut or reset, the server shutting down or starting, a connection the
// pool found broken, a lock or busy timeout. Such a failure says nothing
// about the message; the bus's rate limiting waits it out instead of
// spending the message's retries. Anything else (a constraint, a syntax
// error, a value the column refuses, a context the caller cancelled) is
// not transient.
//
// PostgreSQL: SQLSTATE class 08 (connection exception), 57P01 to 57P03
// (admin shutdown, crash shutdown, cannot connect now), 53300 (too many
// connections), 40001 and 40P01 (serialization failure, deadlock).
// MySQL/MariaDB: the driver's invalid or bad connection, errors 1040 (too
// many connections), 1053 (server shutdown), 1205 (lock wait timeout), 1213
// (deadlock). SQLite: "database is locked" (SQLITE_BUSY). All stores: a
// connection refused or reset, an unexpected EOF, a network timeout.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03",
			pg.Code == "53300", pg.Code == "40001", pg.Code == "40P01":
			return true
		}
		return false
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case 1040, 1053, 1205, 1213:
			return true
		}
		return false
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connect), errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.As(err, &netErr):
		return true
	}
	msg := err.Error()
	for _, s := range []string{"database is locked", "conn closed", "connection refused", "connection reset",
		"the database system is shutting down", "the database system is starting up", "server closed the connection",
		"unexpected EOF", "broken pipe", "bad connection", "invalid connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

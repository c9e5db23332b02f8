package dialect

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err is a failure to reach the database
// (connection refused, cut or reset; server shutting down or starting),
// which says nothing about the message: the bus waits it out instead of
// spending retries. Only driver and connection errors count; a
// constraint, a syntax error, a decoding error or an ended context does
// not.
//
// SQLite's "database is locked" (SQLITE_BUSY) counts too.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03", pg.Code == "53300":
			return true
		}
		return false
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case 1040, 1053, 1927, 4031:
			return true
		}
		return false
	}
	var connect *pgconn.ConnectError
	var op *net.OpError
	switch {
	case errors.As(err, &connect), errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.As(err, &op), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	}
	msg := err.Error()
	for _, s := range []string{"database is locked", "conn closed", "the database system is shutting down",
		"the database system is starting up", "server closed the connection unexpectedly"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// MySQLError reports whether err is a MySQL/MariaDB server error with one
// of the numbers (e.g. 1060, ER_DUP_FIELDNAME).
func MySQLError(err error, numbers ...uint16) bool {
	var my *mysql.MySQLError
	return errors.As(err, &my) && slices.Contains(numbers, my.Number)
}

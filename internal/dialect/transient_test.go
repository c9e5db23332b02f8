package dialect

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestTransientIsOnlyTheDatabaseOutOfReach(t *testing.T) {
	urlErr := &url.Error{Op: "parse", URL: "http://[::1", Err: errors.New("missing ']' in host")}
	decodeErr := json.NewDecoder(strings.NewReader("")).Decode(&struct{}{})
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "57P01"}:                                  true,
		&pgconn.PgError{Code: "08006"}:                                  true,
		&pgconn.PgError{Code: "23505"}:                                  false, // unique violation
		&pgconn.PgError{Code: "40P01"}:                                  false, // a deadlock is the message's, retried as such
		&mysql.MySQLError{Number: 1053}:                                 true,
		&mysql.MySQLError{Number: 1062}:                                 false, // duplicate entry
		fmt.Errorf("begin: %w", driver.ErrBadConn):                      true,
		fmt.Errorf("query: %w", mysql.ErrInvalidConn):                   true,
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}:             true,
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED):                    true,
		errors.New("sqlite: database is locked (5) (SQLITE_BUSY)"):      true,
		fmt.Errorf("decode: %w", decodeErr):                             false, // io.EOF of an empty payload
		io.ErrUnexpectedEOF:                                             false,
		urlErr:                                                          false,
		&url.Error{Op: "Get", URL: "http://x", Err: io.EOF}:             false, // an HTTP client's error
		context.DeadlineExceeded:                                        false,
		fmt.Errorf("handler: %w", context.Canceled):                     false,
		errors.New("customer has an invalid connection to its account"): false,
	} {
		if got := Transient(err); got != want {
			t.Errorf("Transient(%v) = %v, want %v", err, got, want)
		}
	}
}

package dialect

import (
	"context"
	"database/sql"
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
	"time"

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
		&pgconn.PgError{Code: "40P01"}:                                  false, // a deadlock: contention (Contention), not an outage
		&mysql.MySQLError{Number: 1053}:                                 true,
		&mysql.MySQLError{Number: 1927}:                                 true,  // connection killed
		&mysql.MySQLError{Number: 1040}:                                 true,  // too many connections
		&mysql.MySQLError{Number: 4031}:                                 true,  // disconnected by the server
		mysql.ErrInvalidConn:                                            true,  // a statement running when the server died or stopped, as the driver returns it
		fmt.Errorf("unitofwork: commit: %w", mysql.ErrInvalidConn):      true,  // its COMMIT: the outcome unknown, the inbox settles it
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

// TestTransientMySQLDriverErrors: what go-sql-driver/mysql returns, through
// database/sql, when MariaDB is out of reach: a port nothing listens on (a
// server down), a server that closes the connection at once (one dying),
// and the error packets a server sends a new connection when it is
// shutting down or full. Each is transient; TestMariaDBKilledThenStopped
// (bus, -fault.mariadb) sees the statements cut mid-run.
func TestTransientMySQLDriverErrors(t *testing.T) {
	ping := func(t *testing.T, addr string) error {
		db, err := sql.Open("mysql", "root@tcp("+addr+")/postroom?timeout=2s")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = db.PingContext(ctx)
		if err == nil {
			t.Fatal("ping succeeded")
		}
		return err
	}
	// serve answers every connection with reply (nothing: closes at once).
	serve := func(t *testing.T, reply []byte) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write(reply)
				_ = c.Close()
			}
		}()
		return l.Addr().String()
	}
	// errorPacket is a server's error packet (sequence 0: before the
	// handshake) with number and message.
	errorPacket := func(number uint16, state, message string) []byte {
		body := append([]byte{0xff, byte(number), byte(number >> 8), '#'}, state+message...)
		return append([]byte{byte(len(body)), byte(len(body) >> 8), byte(len(body) >> 16), 0}, body...)
	}
	t.Run("nothing listens", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if err := ping(t, addr); !Transient(err) {
			t.Errorf("Transient(%v) = false", err)
		}
	})
	t.Run("the server closes the connection", func(t *testing.T) {
		if err := ping(t, serve(t, nil)); !Transient(err) {
			t.Errorf("Transient(%v) = false", err)
		}
	})
	for _, e := range []struct {
		number  uint16
		state   string
		message string
	}{
		{1053, "08S01", "Server shutdown in progress"},
		{1040, "08004", "Too many connections"},
	} {
		t.Run(e.message, func(t *testing.T) {
			err := ping(t, serve(t, errorPacket(e.number, e.state, e.message)))
			var my *mysql.MySQLError
			if !errors.As(err, &my) || my.Number != e.number {
				t.Fatalf("ping: %v, want error %d", err, e.number)
			}
			if !Transient(err) {
				t.Errorf("Transient(%v) = false", err)
			}
		})
	}
}

func TestContentionIsDeadlocksAndLockWaits(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}, true},
		{fmt.Errorf("inbox: claim key: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{&pgconn.PgError{Code: "57P01"}, false}, // an outage: Transient
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}, true},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded; try restarting transaction"}, true},
		{&mysql.MySQLError{Number: 1062}, false},
		{errors.New("database is locked"), false},
		{errors.New("deadlock detected"), false}, // words, not the server's code
		// A MariaDB batch: the deadlock ended the transaction, and the
		// rollback to the member's savepoint failed after it.
		{fmt.Errorf("unitofwork: batch broke: %w", fmt.Errorf("%w (after: %w)", &mysql.MySQLError{Number: 1305, Message: "SAVEPOINT postroom_1 does not exist"},
			&mysql.MySQLError{Number: 1213})), true},
		{errors.Join(errors.New("first"), &pgconn.PgError{Code: "40001"}), true},
		{fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1305}), false},
		{nil, false},
	} {
		if got := Contention(c.err); got != c.want {
			t.Errorf("Contention(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

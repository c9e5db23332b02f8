package sqlitedriver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	_ "github.com/glebarez/go-sqlite" // registers the driver "sqlite"
)

// Open opens a connection pool on the SQLite database dsn names
// (glebarez/go-sqlite's DSN: a path, then its query parameters).
func Open(dsn string) (*sql.DB, error) {
	probe, err := sql.Open("sqlite", "")
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	if err := probe.Close(); err != nil {
		return nil, err
	}
	return sql.OpenDB(connector{dsn: dsn, drv: drv}), nil
}

// connector makes glebarez/go-sqlite's connections conns.
type connector struct {
	dsn string
	drv driver.Driver
}

func (c connector) Connect(context.Context) (driver.Conn, error) {
	dc, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(sqliteConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("sqlitedriver: the driver's connection is a %T, without the methods it is wrapped for", dc)
	}
	return &conn{sqliteConn: sc}, nil
}

// Driver is the driver, marked as wrapped (see Opened).
func (c connector) Driver() driver.Driver { return wrapped{c.drv} }

// wrapped marks the driver of a pool Open opened.
type wrapped struct{ driver.Driver }

// Opened reports whether db was opened by Open: a SQLite pool opened
// otherwise keeps glebarez/go-sqlite's transaction open after a failed
// COMMIT.
func Opened(db *sql.DB) bool {
	_, ok := db.Driver().(wrapped)
	return ok
}

// sqliteConn is what glebarez/go-sqlite's connection does; conn has it all,
// so that database/sql takes the same paths as with the driver alone.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
}

// conn is a connection whose transactions end when their COMMIT fails.
type conn struct {
	sqliteConn
	bad atomic.Bool // a failed COMMIT left its transaction in an unknown state
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	t, err := c.sqliteConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{Tx: t, conn: c}, nil
}

// IsValid is false once a failed COMMIT's transaction could not be ended,
// so database/sql closes the connection (not driver.ErrBadConn, which the
// bus would take for a database out of reach).
func (c *conn) IsValid() bool { return !c.bad.Load() }

// Begin is BeginTx with the default options (driver.Conn's older method).
func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

// tx rolls back on its connection when its COMMIT fails.
type tx struct {
	driver.Tx
	conn *conn
}

func (t *tx) Commit() error {
	err := t.Tx.Commit()
	if err == nil {
		return nil
	}
	_, rbErr := t.conn.sqliteConn.ExecContext(context.Background(), "ROLLBACK", nil)
	if rbErr == nil || strings.Contains(rbErr.Error(), "no transaction is active") {
		return err // ended: SQLite rolled it back itself, or the ROLLBACK did
	}
	t.conn.bad.Store(true) // not known to be ended: the connection goes
	return errors.Join(err, fmt.Errorf("sqlitedriver: the ROLLBACK after it: %w", rbErr))
}

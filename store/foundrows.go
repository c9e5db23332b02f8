package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
)

// ErrFoundRows is the error of a MySQL connection that counts the rows an
// update matched instead of those it changed (CLIENT_FOUND_ROWS, the
// driver's clientFoundRows=true). The inbox tells a new key from a
// duplicate, and the stale check a newer version from an older one, by the
// rows their statements changed: on such a connection every duplicate
// would be handled again, every older update applied, without a word.
var ErrFoundRows = errors.New("the MySQL connection counts found rows (clientFoundRows=true, CLIENT_FOUND_ROWS): " +
	"postroom tells a duplicate from a new message by the rows an insert changed, which that makes the same; remove the option")

// checkMySQLDSN refuses a MySQL DSN (without its mysql:// prefix) that
// sets clientFoundRows, or a loc other than UTC.
func checkMySQLDSN(dsn string) error {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		if strings.Contains(err.Error(), "default addr for network") {
			// user@127.0.0.1:3306/db: the driver takes the address for a
			// network's name and says "default addr for network
			// '127.0.0.1:3306' unknown", which names no fix.
			return fmt.Errorf("%w: the MySQL address needs its protocol, as in user@tcp(host:3306)/db: use %s", ErrBadDSN, dsnparse.Forms)
		}
		return nil // the driver says what is wrong when it opens
	}
	if cfg.ClientFoundRows {
		return fmt.Errorf("store: %w", ErrFoundRows)
	}
	if cfg.Loc != time.UTC {
		return fmt.Errorf("store: %w (the DSN sets loc=%s)", ErrTimeZone, cfg.Loc)
	}
	return nil
}

// CheckFoundRows fails with ErrFoundRows when db, on MySQL/MariaDB, was
// opened with clientFoundRows=true (a *gorm.DB not opened by Open). It
// updates a row of the migrations table to its own value, in a
// transaction it rolls back: 0 rows changed on a right connection, 1
// found on such a one. Nothing to check on other databases, or before the
// first migration.
func CheckFoundRows(ctx context.Context, db *gorm.DB) error {
	d, err := dialect.Of(db)
	if err != nil || d != dialect.MySQL {
		return err
	}
	probe := errors.New("probe done")
	var rows int64
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec("UPDATE " + dialect.MigrationsTableDefault + " SET version = version LIMIT 1")
		if res.Error != nil {
			return res.Error
		}
		rows = res.RowsAffected
		return probe // roll back
	})
	var noTable *gomysql.MySQLError
	switch {
	case errors.Is(err, probe):
	case errors.As(err, &noTable) && noTable.Number == 1146: // no migrations table yet
		return nil
	case err != nil:
		return fmt.Errorf("store: check the connection's row counts: %w", err)
	}
	if rows != 0 {
		return fmt.Errorf("store: %w", ErrFoundRows)
	}
	return nil
}

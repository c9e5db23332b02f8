package store

import (
	"context"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialects"
)

// ErrFoundRows is the error of a MySQL connection that counts the rows an
// update matched instead of those it changed (clientFoundRows=true): the
// inbox and the stale check decide by rows changed, so every duplicate
// would be handled again and every older update applied, silently.
var ErrFoundRows = mysql.ErrFoundRows

// CheckFoundRows fails with ErrFoundRows when db, on MySQL/MariaDB, was
// opened with clientFoundRows=true (not by Open). Nothing to check on
// other databases, or before the first migration.
func CheckFoundRows(ctx context.Context, db *gorm.DB) error {
	d, err := dialects.Of(db)
	if err != nil || d.FoundRowsProbe() == "" {
		return err
	}
	probe := errors.New("probe done")
	var rows int64
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(d.FoundRowsProbe())
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

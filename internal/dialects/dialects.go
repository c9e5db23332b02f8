// Package dialects finds the dialect of a database among those postroom
// speaks: one package per database under internal/dialect.
package dialects

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

// All are the dialects postroom speaks.
var All = []dialect.Dialect{postgres.Dialect{}, mysql.Dialect{}, sqlite.Dialect{}}

// Of returns the dialect of db.
func Of(db *gorm.DB) (dialect.Dialect, error) {
	if db == nil || db.Config == nil || db.Dialector == nil {
		return nil, errors.New("the *gorm.DB is nil: open one with store.Open")
	}
	name := db.Dialector.Name()
	for _, d := range All {
		if d.Dialector(name) {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: gorm dialector %q (use PostgreSQL, MySQL/MariaDB or SQLite)", dialect.ErrUnsupported, name)
}

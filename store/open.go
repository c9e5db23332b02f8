package store

import (
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/dialect/sqlite"
	"github.com/postroom/postroom/internal/dsnparse"
)

// MaxIdleConnsDefault is how many idle connections a PostgreSQL or MySQL
// pool keeps (database/sql's default, 2, would mean a connection per
// message under higher concurrency).
const MaxIdleConnsDefault = 16

// BusyTimeoutDefault is how long a SQLite statement waits for the writer lock.
const BusyTimeoutDefault = sqlite.BusyTimeout

// Open opens the database named by dsn, of a form the package doc lists
// (else ErrBadDSN). Errors never contain the DSN's password.
func Open(dsn string) (*gorm.DB, error) {
	d, err := dsnparse.Dialect(dsn)
	if err != nil {
		return nil, err
	}
	db, err := d.Open(dsn, &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		if db != nil {
			_ = Close(db)
		}
		return nil, fmt.Errorf("store: open %s: %w", dsnparse.Redact(dsn), dsnparse.RedactErr(err, dsn))
	}
	if sqlDB, e := db.DB(); e == nil {
		sqlDB.SetMaxIdleConns(MaxIdleConnsDefault)
	}
	return db, nil
}

// Close closes db's connection pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

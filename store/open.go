package store

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/internal/pgdriver"
	"github.com/postroom/postroom/internal/sqlitedriver"
)

// MaxIdleConnsDefault is how many idle connections a PostgreSQL or MySQL
// pool keeps (database/sql keeps 2).
const MaxIdleConnsDefault = 16

// BusyTimeoutDefault is how long a SQLite statement waits for the writer lock.
const BusyTimeoutDefault = 10 * time.Second

// Open opens the database named by dsn (see the package documentation for
// the forms it takes); a DSN of no form it knows is an error wrapping
// ErrBadDSN, never a new SQLite file. Errors never contain the DSN's
// password.
func Open(dsn string) (*gorm.DB, error) {
	d, err := dsnparse.Dialect(dsn)
	if err != nil {
		return nil, err
	}
	cfg := &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true}
	var db *gorm.DB
	switch d {
	case dialect.Postgres:
		db, err = openPostgres(dsn, cfg)
	case dialect.MySQL:
		mdsn := mysqlDSN(strings.TrimPrefix(dsn, "mysql://"))
		if err := checkMySQLDSN(mdsn); err != nil {
			return nil, err
		}
		db, err = gorm.Open(mysql.Open(mdsn), cfg)
	default:
		db, err = openSQLite(dsn, cfg)
	}
	if err == nil && d != dialect.SQLite {
		// database/sql keeps 2 idle connections by default: under a
		// concurrency above that, connections would be opened and closed
		// per message.
		if sqlDB, e := db.DB(); e == nil {
			sqlDB.SetMaxIdleConns(MaxIdleConnsDefault)
		}
	}
	if err != nil {
		if db != nil {
			_ = Close(db)
		}
		return nil, fmt.Errorf("store: open %s: %w", dsnparse.Redact(dsn), dsnparse.RedactErr(err, dsn))
	}
	return db, nil
}

// openPostgres opens PostgreSQL through pgx's driver whose transactions
// send BEGIN with their first statement (internal/pgdriver): one round
// trip less per transaction.
func openPostgres(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	sqlDB, err := pgdriver.Open(dsn)
	if err != nil {
		return nil, err
	}
	return openOn(sqlDB, postgres.New(postgres.Config{Conn: sqlDB}), cfg)
}

// openOn opens gorm with dialector on the pool sqlDB of postroom's own
// driver, closing the pool if that fails.
func openOn(sqlDB *sql.DB, dialector gorm.Dialector, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gorm.Open(dialector, cfg)
	if err != nil {
		_ = sqlDB.Close()
	}
	return db, err
}

// openSQLitePool opens SQLite through internal/sqlitedriver, whose
// transactions end when their COMMIT fails.
func openSQLitePool(path string, cfg *gorm.Config) (*gorm.DB, error) {
	sqlDB, err := sqlitedriver.Open(path)
	if err != nil {
		return nil, err
	}
	return openOn(sqlDB, sqlite.Dialector{DriverName: "sqlite", DSN: path, Conn: sqlDB}, cfg)
}

// Close closes db's connection pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

func mysqlDSN(dsn string) string {
	if strings.Contains(dsn, "parseTime=") {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&parseTime=true"
	}
	return dsn + "?parseTime=true"
}

func openSQLite(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "sqlite:")
	if path == ":memory:" {
		path = "file::memory:"
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	// _txlock=immediate: a transaction takes the write lock at BEGIN, so two
	// processes never deadlock upgrading a read to a write.
	path += sep + fmt.Sprintf("_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)", BusyTimeoutDefault.Milliseconds())
	// Switching a new file to WAL takes its lock without SQLite's busy
	// handler: processes opening one file at once can get SQLITE_BUSY here,
	// so the open is tried again for as long as the busy timeout.
	db, err := openSQLitePool(path, cfg)
	for deadline := time.Now().Add(BusyTimeoutDefault); err != nil && strings.Contains(err.Error(), "SQLITE_BUSY") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		db, err = openSQLitePool(path, cfg)
	}
	if err != nil {
		return db, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return db, err
	}
	// One writer: a single connection serialises every transaction, so
	// concurrent handlers wait their turn instead of failing with SQLITE_BUSY.
	sqlDB.SetMaxOpenConns(1)
	return db, nil
}

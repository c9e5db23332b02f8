package store

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/dialect"
)

// MaxIdleConnsDefault is how many idle connections a PostgreSQL or MySQL
// pool keeps (database/sql keeps 2).
const MaxIdleConnsDefault = 16

// BusyTimeoutDefault is how long a SQLite statement waits for the writer lock.
const BusyTimeoutDefault = 10 * time.Second

// ErrBadDSN is returned for a DSN that names no supported database.
var ErrBadDSN = errors.New("store: bad DSN")

// Open opens the database named by dsn (see the package documentation for
// the forms it takes). Errors never contain the DSN's password.
func Open(dsn string) (*gorm.DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, fmt.Errorf("%w: empty (use postgres://…, mysql://…, a SQLite file or :memory:)", ErrBadDSN)
	}
	cfg := &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true}
	var (
		db  *gorm.DB
		err error
	)
	switch dialectOfDSN(dsn) {
	case dialect.Postgres:
		db, err = gorm.Open(postgres.Open(dsn), cfg)
	case dialect.MySQL:
		db, err = gorm.Open(mysql.Open(mysqlDSN(strings.TrimPrefix(dsn, "mysql://"))), cfg)
	default:
		db, err = openSQLite(dsn, cfg)
	}
	if err == nil && dialectOfDSN(dsn) != dialect.SQLite {
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
		return nil, fmt.Errorf("store: open %s: %w", Redact(dsn), redactErr(err, dsn))
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

// dialectOfDSN tells the kind of database a DSN names.
func dialectOfDSN(dsn string) dialect.Dialect {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return dialect.Postgres
	case strings.HasPrefix(dsn, "mysql://"), strings.Contains(dsn, "@tcp("), strings.Contains(dsn, "@unix("):
		return dialect.MySQL
	default:
		return dialect.SQLite
	}
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
	db, err := gorm.Open(sqlite.Open(path), cfg)
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

var mysqlPassword = regexp.MustCompile(`^([^:@/]*):([^@]*)@`)

// Redact returns dsn with any password replaced by "xxxxx".
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
		return dsn
	}
	if rest, ok := strings.CutPrefix(dsn, "mysql://"); ok {
		return "mysql://" + mysqlPassword.ReplaceAllString(rest, "$1:xxxxx@")
	}
	return mysqlPassword.ReplaceAllString(dsn, "$1:xxxxx@")
}

// redactErr removes the DSN's password from a driver error's text.
func redactErr(err error, dsn string) error {
	pw := password(dsn)
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

func password(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		pw, _ := u.User.Password()
		return pw
	}
	if m := mysqlPassword.FindStringSubmatch(strings.TrimPrefix(dsn, "mysql://")); m != nil {
		return m[2]
	}
	return ""
}

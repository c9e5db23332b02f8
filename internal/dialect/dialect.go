package dialect

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"
)

// Dialect names a SQL dialect postroom speaks.
type Dialect string

// The dialects postroom supports.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

// ErrUnsupported is returned for a database whose dialect postroom does not
// speak, or for what a database lacks (the outbox on SQLite).
// Its message says only that; each use says what is missing, and on
// which databases it exists: a fixed list of the supported databases
// would name SQLite even where SQLite is the one unsupported.
var ErrUnsupported = errors.New("dialect: unsupported")

// Of returns the dialect of db.
func Of(db *gorm.DB) (Dialect, error) {
	if db == nil || db.Config == nil || db.Dialector == nil {
		return "", errors.New("the *gorm.DB is nil: open one with store.Open")
	}
	switch name := db.Dialector.Name(); name {
	case "postgres", "pgx":
		return Postgres, nil
	case "mysql":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	default:
		return "", fmt.Errorf("%w: gorm dialector %q (use PostgreSQL, MySQL/MariaDB or SQLite)", ErrUnsupported, name)
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// ErrBadIdentifier is returned for a table name that is not a plain SQL identifier.
var ErrBadIdentifier = errors.New("dialect: bad table name")

// ValidateIdentifier reports whether name can be used as a table name: letters,
// digits and underscores, not starting with a digit, at most 63 characters,
// optionally qualified by one schema ("schema.table"). Names are never quoted
// or escaped, so anything else is refused.
func ValidateIdentifier(name string) error {
	if !identifier.MatchString(name) {
		return fmt.Errorf("%w %q: use letters, digits and underscores only (optionally schema.table), at most 63 characters each", ErrBadIdentifier, name)
	}
	return nil
}

// Native rewrites a query written with ? placeholders into the driver's own
// ($1, $2, … on PostgreSQL), for statements run without gorm. postroom's
// statements never contain a literal question mark.
func (d Dialect) Native(query string) string {
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ExactText reports whether every store keeps s byte for byte: valid UTF-8
// without NUL (PostgreSQL refuses NUL in text). Keys, entity IDs and
// message IDs are refused otherwise, on every store alike.
func ExactText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

package store

import (
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
)

// ErrBadDSN is wrapped by Open's error for a DSN naming no supported database.
var ErrBadDSN = dialect.ErrBadDSN

// Redact returns dsn with every password replaced by "xxxxx": a URL's
// user password or ?password=, the go-sql-driver form's, and PostgreSQL's
// keyword password=.
func Redact(dsn string) string { return dsnparse.Redact(dsn) }

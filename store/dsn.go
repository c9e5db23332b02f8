package store

import (
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
)

// ErrBadDSN is what the error of Open wraps for a DSN that names no
// supported database.
var ErrBadDSN = dialect.ErrBadDSN

// Redact returns dsn with every password replaced by "xxxxx": a URL's
// user password or ?password=, the go-sql-driver form's, and PostgreSQL's
// keyword password=.
func Redact(dsn string) string { return dsnparse.Redact(dsn) }

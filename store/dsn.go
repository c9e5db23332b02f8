package store

import (
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
)

// ErrBadDSN is what the error of Open wraps for a DSN that names no
// supported database.
var ErrBadDSN = dialect.ErrBadDSN

// Redact returns dsn with every password in it replaced by "xxxxx": the
// password of a URL's user ("postgres://app:…@host/db", "amqp://…"), of
// the go-sql-driver form ("app:…@tcp(host:3306)/db"), a password= value
// of PostgreSQL's keyword form ("host=db password=…") and a password
// parameter of a URL's query ("?password=…").
func Redact(dsn string) string { return dsnparse.Redact(dsn) }

// Package dsnparse tells the database a DSN names and hides its
// passwords, for store.Open and the postroom command.
package dsnparse

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

var (
	// pgKeywords is PostgreSQL's keyword/value form: key=value pairs, one
	// of them naming the host or the database.
	pgKeywords   = regexp.MustCompile(`^\s*[a-z_]+\s*=`)
	pgConnection = regexp.MustCompile(`(^|\s)(host|hostaddr|dbname)\s*=`)
	sqliteFile   = []string{".db", ".sqlite", ".sqlite3"}
)

// Dialect tells the kind of database a DSN names, or says why it
// names none: a DSN that is not clearly SQLite never opens a SQLite file
// (a host name would create an empty local database).
func Dialect(dsn string) (dialect.Dialect, error) {
	s := strings.TrimSpace(dsn)
	switch {
	case s == "":
		return nil, fmt.Errorf("%w: empty: use %s", dialect.ErrBadDSN, dialect.DSNForms)
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return postgres.Dialect{}, nil
	case strings.HasPrefix(s, "mysql://"), strings.Contains(s, "@tcp("), strings.Contains(s, "@unix("):
		return mysql.Dialect{}, nil
	case strings.HasPrefix(s, "sqlite:"), strings.HasPrefix(s, "file:"), s == ":memory:":
		return sqlite.Dialect{}, nil
	case pgKeywords.MatchString(s) && pgConnection.MatchString(s):
		return postgres.Dialect{}, nil
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		return nil, fmt.Errorf("%w %s: unknown scheme %q: use %s", dialect.ErrBadDSN, Redact(dsn), scheme, dialect.DSNForms)
	}
	file, _, _ := strings.Cut(s, "?")
	if slices.Contains(sqliteFile, strings.ToLower(path.Ext(file))) {
		return sqlite.Dialect{}, nil
	}
	return nil, fmt.Errorf("%w %s: not a PostgreSQL, MySQL or SQLite DSN (a SQLite file needs the sqlite: scheme or a name ending in .db, .sqlite or .sqlite3): use %s",
		dialect.ErrBadDSN, Redact(dsn), dialect.DSNForms)
}

// LocalFile returns the file a DSN names (SQLite's), and false for a DSN
// of a server or of an in-memory database.
func LocalFile(dsn string) (string, bool) {
	if d, err := Dialect(dsn); err == nil {
		return d.LocalFile(dsn)
	}
	return "", false
}

// Plan returns, in order, the SQL statements that store.Migrate would run
// on a database of dsn's kind that has none of postroom's schema yet. It
// does not connect.
func Plan(dsn string, tables dialect.Tables) ([]string, error) {
	d, err := Dialect(dsn)
	if err != nil {
		return nil, err
	}
	if err := tables.Validate(); err != nil {
		return nil, err
	}
	tables = tables.WithDefaults()
	stmts, err := d.MigrationsTable(dialect.MigrationsTableDefault)
	if err != nil {
		return nil, err
	}
	out := []string{stmts.Create}
	for _, m := range d.Migrations(tables) {
		out = append(out, fmt.Sprintf("-- %d: %s", m.Version, m.Name))
		out = append(out, m.Statements...)
	}
	return out, nil
}

// Redact returns dsn with every password in it replaced by "xxxxx": the
// password of a URL's user ("postgres://app:…@host/db", "amqp://…"), of
// the go-sql-driver form ("app:…@tcp(host:3306)/db"), a password= value
// of PostgreSQL's keyword form ("host=db password=…") and a password
// parameter of a URL's query ("?password=…").
func Redact(dsn string) string {
	spans := passwordSpans(dsn)
	for i := len(spans) - 1; i >= 0; i-- {
		dsn = dsn[:spans[i][0]] + "xxxxx" + dsn[spans[i][1]:]
	}
	return dsn
}

// RedactText returns text with dsn and each of its passwords redacted,
// for a driver's error that quotes either.
func RedactText(text, dsn string) string {
	if dsn == "" {
		return text
	}
	text = strings.ReplaceAll(text, dsn, Redact(dsn))
	for _, pw := range passwords(dsn) {
		text = strings.ReplaceAll(text, pw, "xxxxx")
	}
	return text
}

// RedactErr is err with the passwords of dsn redacted from its text; err
// itself when there is none in it.
func RedactErr(err error, dsn string) error {
	if text := RedactText(err.Error(), dsn); text != err.Error() {
		return errors.New(text)
	}
	return err
}

var (
	keywordPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
	queryPassword   = regexp.MustCompile(`[?&]password=([^&#]*)`)
)

// passwordSpans returns where the passwords of dsn are, in order and
// without overlaps.
func passwordSpans(dsn string) [][2]int {
	var spans [][2]int
	if span, ok := userPassword(dsn); ok {
		spans = append(spans, span)
	}
	for _, re := range []*regexp.Regexp{keywordPassword, queryPassword} {
		for _, m := range re.FindAllStringSubmatchIndex(dsn, -1) {
			if m[3] > m[2] {
				spans = append(spans, [2]int{m[2], m[3]})
			}
		}
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] < out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// userPassword finds the password of "user:password@" before the host: in
// a URL the userinfo ends at the last '@' of the authority; in the
// go-sql-driver form, as that driver reads it, at the last '@' before the
// last '/'.
func userPassword(dsn string) ([2]int, bool) {
	start := 0
	if i := strings.Index(dsn, "://"); i >= 0 {
		start = i + 3
	}
	end := len(dsn)
	if strings.HasPrefix(dsn, "mysql://") || strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") {
		if slash := strings.LastIndexByte(dsn, '/'); slash >= start {
			end = slash
		}
	} else if start == 0 {
		return [2]int{}, false // neither a URL nor the go-sql-driver form
	} else if i := strings.IndexAny(dsn[start:], "?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndexByte(dsn[start:end], '@')
	if at < 0 {
		return [2]int{}, false
	}
	colon := strings.IndexByte(dsn[start:start+at], ':')
	if colon < 0 || colon+1 == at {
		return [2]int{}, false
	}
	return [2]int{start + colon + 1, start + at}, true
}

// passwords returns the passwords of dsn as written and as a driver may
// quote them (unescaped, unquoted).
func passwords(dsn string) []string {
	var out []string
	for _, s := range passwordSpans(dsn) {
		pw := dsn[s[0]:s[1]]
		out = append(out, pw)
		if u, err := url.PathUnescape(pw); err == nil && u != pw {
			out = append(out, u)
		}
		if len(pw) >= 2 && pw[0] == '\'' && pw[len(pw)-1] == '\'' {
			out = append(out, strings.ReplaceAll(pw[1:len(pw)-1], `\'`, `'`))
		}
	}
	return out
}

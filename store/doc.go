// Package store opens postroom's database and manages its schema.
//
// # Opening
//
// [Open] takes one DSN and returns a *gorm.DB configured for postroom:
//
//   - "postgres://…" or "postgresql://…", or PostgreSQL's keyword form
//     ("host=db dbname=app user=app"): PostgreSQL through pgx, sending
//     BEGIN with the first statement in one round trip; through
//     sql.Conn.Raw, pgx's connection comes from the driver connection's
//     Conn method (it is not a *stdlib.Conn);
//   - "mysql://user:pass@tcp(host:3306)/db", or the same without the scheme
//     (go-sql-driver's form): MySQL or MariaDB (parseTime is forced on;
//     clientFoundRows=true is refused, ErrFoundRows);
//   - "sqlite:path", "sqlite://path", a "file:" URI, ":memory:", or a path
//     ending in .db, .sqlite or .sqlite3: SQLite (pure Go), WAL mode, a
//     busy timeout and one connection, so handlers queue for the writer.
//
// Anything else is an error wrapping [ErrBadDSN], never a new SQLite file.
// Errors never show a password; [Redact] hides them for a log line.
//
// # Schema
//
// [Migrate] applies postroom's versioned migrations and records them in
// postroom_migrations; `postroom migrate --print` prints the SQL for a
// DBA. A bus uses the default name of every table; other names in
// [Tables] serve the inbox, stale and scheduler packages used without it
// (see docs/operations.md, "Schema").
package store

// Package store opens postroom's database and manages its schema.
//
// # Opening
//
// [Open] takes one DSN and returns a *gorm.DB configured for postroom:
//
//   - "postgres://…" or "postgresql://…", or PostgreSQL's keyword form
//     ("host=db dbname=app user=app"): PostgreSQL through pgx (the primary
//     target), whose transactions send BEGIN with their first statement in
//     one round trip; code that reaches pgx's connection through
//     sql.Conn.Raw gets it from the driver connection's Conn method (it is
//     not a *stdlib.Conn);
//   - "mysql://user:pass@tcp(host:3306)/db", or the same without the scheme
//     (go-sql-driver's form): MySQL or MariaDB (parseTime is forced on;
//     clientFoundRows=true is refused, ErrFoundRows);
//   - "sqlite:path", "sqlite://path", a "file:" URI, ":memory:", or a path
//     ending in .db, .sqlite or .sqlite3: SQLite through a pure-Go driver,
//     in WAL mode with a busy timeout and a single connection, so
//     concurrent handlers queue for the one writer instead of failing with
//     "database is locked".
//
// Anything else is an error wrapping [ErrBadDSN] that lists these forms:
// a host name or a mistyped scheme never creates a local
// SQLite file. Errors never show a password; [Redact] hides the passwords
// of a DSN for a log line.
//
// # Schema
//
// [Migrate] applies postroom's versioned migrations for the database's
// dialect and records them in the postroom_migrations table; version 1
// creates the inbox, stale watermark, schedules, delayed and deliveries
// tables and, on PostgreSQL and MySQL/MariaDB, the outbox's. `postroom
// migrate --print` prints the SQL it would run, for a DBA. The names in
// [Tables] are validated as identifiers; the postroom command renames the
// inbox, watermark and schedules tables (--inbox-table, --watermarks-table,
// --schedules-table), and a bus (bus.New) uses the default name of every
// table. Other names serve the inbox, stale and scheduler packages used
// without the bus (their Config.Table).
package store

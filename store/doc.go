// Package store opens postroom's database and manages its schema.
//
// # Opening
//
// [Open] takes one DSN and returns a *gorm.DB configured for postroom:
//
//   - "postgres://…" or "postgresql://…": PostgreSQL through pgx (the primary target);
//   - "mysql://user:pass@tcp(host:3306)/db" (the scheme may be left out): MySQL or MariaDB (parseTime is forced on);
//   - ":memory:", "sqlite://path" or a file path: SQLite through a pure-Go
//     driver, in WAL mode with a busy timeout and a single connection, so
//     concurrent handlers queue for the one writer instead of failing with
//     "database is locked".
//
// # Schema
//
// [Migrate] applies postroom's versioned migrations (inbox, stale
// watermarks, schedules) for the database's dialect and records them in the
// migrations table; [Plan] returns the SQL it would run, for a DBA. Table
// names are configurable through [Tables] and validated as identifiers.
package store

package dialect

// MigrationLock returns the statements that take and release a lock that
// serialises concurrent migrations, or empty strings where the dialect needs
// none (SQLite has a single writer).
func (d Dialect) MigrationLock() (lock, unlock string) {
	switch d {
	case Postgres:
		return "SELECT pg_advisory_lock(7436180)", "SELECT pg_advisory_unlock(7436180)"
	case MySQL:
		return "SELECT GET_LOCK('postroom_migrate', 60)", "SELECT RELEASE_LOCK('postroom_migrate')"
	default:
		return "", ""
	}
}

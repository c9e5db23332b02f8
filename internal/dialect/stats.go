package dialect

import "strings"

// RowEstimate returns the query of the planner's row estimate of table
// and its arguments, or "" on SQLite, which keeps none. The query returns
// -1 when there is no estimate yet.
func (d Dialect) RowEstimate(table string) (string, []any) {
	switch d {
	case Postgres:
		return "SELECT COALESCE(MAX(reltuples), -1)::BIGINT FROM pg_class WHERE oid = to_regclass(?)", []any{table}
	case MySQL:
		if schema, name, ok := strings.Cut(table, "."); ok {
			return "SELECT COALESCE(MAX(TABLE_ROWS), -1) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", []any{schema, name}
		}
		return "SELECT COALESCE(MAX(TABLE_ROWS), -1) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", []any{table}
	default:
		return "", nil
	}
}

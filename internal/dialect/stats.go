package dialect

import (
	"fmt"
	"strings"
)

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

// OldestSample returns, for a large table whose time column has a BRIN
// index (the inbox on PostgreSQL), a query of the oldest time in a sample
// of about sampleRows of its estimated rows; "" where MIN is an index
// lookup already. The sample's oldest is an upper bound of the table's:
// OldestBelow then finds the exact one through the BRIN index, reading
// only the block ranges that hold anything older, instead of the whole
// table.
func (d Dialect) OldestSample(table, column string, estimatedRows int64) string {
	if d != Postgres || estimatedRows <= 0 {
		return ""
	}
	const sampleRows = 20_000
	percent := min(100, 100*float64(sampleRows)/float64(estimatedRows))
	return fmt.Sprintf("SELECT MIN(%s) FROM %s TABLESAMPLE SYSTEM (%.4f)", column, table, percent)
}

// OldestBelow returns the query of the oldest time of column in table at
// or below its one argument.
func OldestBelow(table, column string) string {
	return "SELECT MIN(" + column + ") FROM " + table + " WHERE " + column + " <= ?"
}

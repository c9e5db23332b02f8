package dialect

import "fmt"

// StatsQueries describe one table's rows and its oldest row.
type StatsQueries struct {
	// Table is the table's name.
	Table string
	// Estimate is the planner's row estimate (-1: none yet), with its
	// arguments EstimateArgs; "" on SQLite.
	Estimate     string
	EstimateArgs []any
	// Count counts the rows exactly.
	Count string
	// Oldest reads the oldest time (NULL when empty).
	Oldest string
	// OldestBelow is Oldest at or below its one argument.
	OldestBelow string

	column string
	brin   bool // the time column's index is BRIN, which cannot answer MIN
}

// StatsOn is Dialect.Stats: estimate returns a table's Estimate and its
// arguments (nil: none); inboxBRIN says the inbox's time index is BRIN.
func StatsOn(t Tables, estimate func(table string) (string, []any), inboxBRIN bool) ([]StatsQueries, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	t = t.WithDefaults()
	return []StatsQueries{statsQueries(t.Inbox, "received_at", inboxBRIN, estimate), statsQueries(t.Watermarks, "updated_at", false, estimate)}, nil
}

func statsQueries(table, column string, brin bool, estimate func(table string) (string, []any)) StatsQueries {
	q := StatsQueries{
		Table:       table,
		Count:       "SELECT COUNT(*) FROM " + table,
		Oldest:      "SELECT MIN(" + column + ") FROM " + table,
		OldestBelow: "SELECT MIN(" + column + ") FROM " + table + " WHERE " + column + " <= ?",
		column:      column,
		brin:        brin,
	}
	if estimate != nil {
		q.Estimate, q.EstimateArgs = estimate(table)
	}
	return q
}

// OldestSample returns, for a table with a BRIN time index (the inbox on
// PostgreSQL), a query of the oldest time in a sample of about sampleRows;
// "" where MIN is an index lookup already. That upper bound lets
// OldestBelow read only the older block ranges, not the whole table.
func (q StatsQueries) OldestSample(estimatedRows int64) string {
	if !q.brin || estimatedRows <= 0 {
		return ""
	}
	const sampleRows = 20_000
	percent := min(100, 100*float64(sampleRows)/float64(estimatedRows))
	return fmt.Sprintf("SELECT MIN(%s) FROM %s TABLESAMPLE SYSTEM (%.4f)", q.column, q.Table, percent)
}

// InboxSummary validates table and returns the query of the inbox keys per
// consumer: consumer, rows, oldest received_at, duplicates skipped.
func InboxSummary(table string) (string, error) {
	if err := ValidateIdentifier(table); err != nil {
		return "", err
	}
	return "SELECT consumer, COUNT(*), MIN(received_at), COALESCE(SUM(duplicates), 0) FROM " + table + " GROUP BY consumer ORDER BY consumer", nil
}

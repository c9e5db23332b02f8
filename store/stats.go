package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// ExactCountBelow is the estimate under which Stats counts rows exactly;
// above it, a large table's planner estimate stands in for COUNT(*).
const ExactCountBelow = 100_000

// TableStats describes one of postroom's tables.
type TableStats struct {
	Table string
	// Rows is exact below ExactCountBelow, the planner's estimate above
	// (PostgreSQL, MySQL).
	Rows int64
	// Oldest is the time of the oldest row (received_at, updated_at), zero
	// when the table is empty.
	Oldest time.Time
}

// Stats describes the inbox and watermark tables. It reads indexes,
// estimates and samples, not whole tables, except for the exact count of a
// table under ExactCountBelow rows: call it every minute or so, not per
// message.
func Stats(ctx context.Context, db *gorm.DB, tables Tables) ([]TableStats, error) {
	d, tables, err := prepare(db, tables)
	if err != nil {
		return nil, err
	}
	db = db.WithContext(ctx)
	var out []TableStats
	for _, t := range []struct {
		name, column string
		brin         bool // the time index is BRIN on PostgreSQL (dialect's appendOnly)
	}{{tables.Inbox, "received_at", true}, {tables.Watermarks, "updated_at", false}} {
		s := TableStats{Table: t.name, Rows: -1}
		if q, args := d.RowEstimate(t.name); q != "" {
			if err := db.Raw(q, args...).Row().Scan(&s.Rows); err != nil {
				return nil, fmt.Errorf("store: estimate rows of %s: %w", t.name, err)
			}
		}
		if s.Rows < ExactCountBelow {
			if err := db.Raw("SELECT COUNT(*) FROM " + t.name).Row().Scan(&s.Rows); err != nil {
				return nil, fmt.Errorf("store: count %s: %w", t.name, err)
			}
		}
		if s.Oldest, err = oldest(db, d, t.name, t.column, s.Rows, t.brin); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// oldest returns the oldest time of column in table, zero when it is
// empty. A large table with a BRIN index on column (the inbox on
// PostgreSQL) is sampled first, so that MIN reads the oldest block ranges
// only: a full scan of a 10-million-row inbox every minute is what the
// gauges must not cost.
func oldest(db *gorm.DB, d dialect.Dialect, table, column string, rows int64, brin bool) (time.Time, error) {
	var v any
	if q := d.OldestSample(table, column, rows); brin && rows >= ExactCountBelow && q != "" {
		if err := db.Raw(q).Row().Scan(&v); err != nil {
			return time.Time{}, fmt.Errorf("store: sample the oldest row of %s: %w", table, err)
		}
		if v != nil {
			if err := db.Raw(dialect.OldestBelow(table, column), v).Row().Scan(&v); err != nil {
				return time.Time{}, fmt.Errorf("store: oldest row of %s: %w", table, err)
			}
			return d.ParseTime(v)
		}
		// The sample caught no row: scan it all.
	}
	if err := db.Raw("SELECT MIN(" + column + ") FROM " + table).Row().Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("store: oldest row of %s: %w", table, err)
	}
	return d.ParseTime(v)
}

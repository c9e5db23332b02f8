package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
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

// Stats describes the inbox and watermark tables. On PostgreSQL the oldest
// row costs a scan of the inbox (its time index is BRIN): call it every
// minute or so, not per message.
func Stats(ctx context.Context, db *gorm.DB, tables Tables) ([]TableStats, error) {
	d, tables, err := prepare(db, tables)
	if err != nil {
		return nil, err
	}
	db = db.WithContext(ctx)
	var out []TableStats
	for _, t := range []struct{ name, column string }{{tables.Inbox, "received_at"}, {tables.Watermarks, "updated_at"}} {
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
		var oldest any
		if err := db.Raw("SELECT MIN(" + t.column + ") FROM " + t.name).Row().Scan(&oldest); err != nil {
			return nil, fmt.Errorf("store: oldest row of %s: %w", t.name, err)
		}
		if s.Oldest, err = d.ParseTime(oldest); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

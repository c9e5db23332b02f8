package storeinfo

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/store"
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

// Stats describes the inbox and watermark tables from indexes, estimates
// and samples (exact counts under ExactCountBelow): call it every minute
// or so, not per message.
func Stats(ctx context.Context, db *gorm.DB, tables store.Tables) ([]TableStats, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, err
	}
	queries, err := d.Stats(dialect.Tables(tables))
	if err != nil {
		return nil, err
	}
	db = db.WithContext(ctx)
	var out []TableStats
	for _, q := range queries {
		s := TableStats{Table: q.Table, Rows: -1}
		if q.Estimate != "" {
			if err := db.Raw(q.Estimate, q.EstimateArgs...).Row().Scan(&s.Rows); err != nil {
				return nil, fmt.Errorf("store: estimate rows of %s: %w", q.Table, err)
			}
		}
		if s.Rows < ExactCountBelow {
			if err := db.Raw(q.Count).Row().Scan(&s.Rows); err != nil {
				return nil, fmt.Errorf("store: count %s: %w", q.Table, err)
			}
		}
		if s.Oldest, err = oldest(db, d, q, s.Rows); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// oldest returns the oldest time of q's table, zero when empty. A large
// table with a BRIN index (the inbox on PostgreSQL) is sampled first, so
// the gauges never scan it whole.
func oldest(db *gorm.DB, d dialect.Dialect, q dialect.StatsQueries, rows int64) (time.Time, error) {
	var v any
	if sample := q.OldestSample(rows); rows >= ExactCountBelow && sample != "" {
		if err := db.Raw(sample).Row().Scan(&v); err != nil {
			return time.Time{}, fmt.Errorf("store: sample the oldest row of %s: %w", q.Table, err)
		}
		if v != nil {
			if err := db.Raw(q.OldestBelow, v).Row().Scan(&v); err != nil {
				return time.Time{}, fmt.Errorf("store: oldest row of %s: %w", q.Table, err)
			}
			return d.ParseTime(v)
		}
		// The sample caught no row: scan it all.
	}
	if err := db.Raw(q.Oldest).Row().Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("store: oldest row of %s: %w", q.Table, err)
	}
	return d.ParseTime(v)
}

// ConsumerSummary describes the inbox keys of one consumer.
type ConsumerSummary struct {
	// Consumer is the endpoint and handler ("billing/ChargeCard").
	Consumer string `json:"consumer"`
	// Rows is how many keys it holds.
	Rows int64 `json:"rows"`
	// Oldest is when its oldest key was received.
	Oldest time.Time `json:"oldest"`
	// Duplicates counts the duplicates skipped for the keys still there (a
	// purged key takes its count with it).
	Duplicates int64 `json:"duplicates"`
}

// InboxSummary describes the inbox per consumer, by consumer. It reads the
// whole table: an operator's query, not a gauge.
func InboxSummary(ctx context.Context, db *gorm.DB, tables store.Tables) ([]ConsumerSummary, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, err
	}
	table := tables.WithDefaults().Inbox
	query, err := dialect.InboxSummary(table)
	if err != nil {
		return nil, err
	}
	rows, err := db.WithContext(ctx).Raw(query).Rows()
	if err != nil {
		return nil, fmt.Errorf("store: summarise %s: %w", table, err)
	}
	defer rows.Close()
	var out []ConsumerSummary
	for rows.Next() {
		var s ConsumerSummary
		var oldest any
		if err := rows.Scan(&s.Consumer, &s.Rows, &oldest, &s.Duplicates); err != nil {
			return nil, fmt.Errorf("store: summarise %s: %w", table, err)
		}
		if s.Oldest, err = d.ParseTime(oldest); err != nil {
			return nil, fmt.Errorf("store: summarise %s: %w", table, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: summarise %s: %w", table, err)
	}
	return out, nil
}

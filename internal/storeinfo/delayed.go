package storeinfo

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
)

// Delayed is a message waiting in the delayed table (bus.DeliverAt, or a
// delayed retry of one handler).
type Delayed struct {
	ID          int64     `json:"id"`
	DueAt       time.Time `json:"due_at"`
	Topic       string    `json:"topic"`
	TargetGroup string    `json:"target_group,omitempty"` // a delayed retry's handler group; "" for a delayed delivery
	RelayedBy   string    `json:"relayed_by,omitempty"`   // a delayed delivery's publishers: "transport amqp://…", "endpoint billing", or "any bus" (an empty target_group)
	MessageID   string    `json:"message_id"`
	CreatedAt   time.Time `json:"created_at"`
}

// ListDelayed returns up to limit waiting messages of the delayed table,
// earliest due first.
func ListDelayed(ctx context.Context, db *gorm.DB, limit int) ([]Delayed, error) {
	d, stmts, err := delayedStatements(db)
	if err != nil {
		return nil, err
	}
	rows, err := db.WithContext(ctx).Raw(stmts.List, limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("store: list delayed messages: %w (has `postroom migrate` run?)", err)
	}
	defer rows.Close()
	out := []Delayed{}
	for rows.Next() {
		var r Delayed
		var due, created any
		if err := rows.Scan(&r.ID, &due, &r.Topic, &r.TargetGroup, &r.MessageID, &created); err != nil {
			return nil, fmt.Errorf("store: list delayed messages: %w", err)
		}
		if relay, ok := dialect.DelayedRelay(r.TargetGroup); ok {
			r.RelayedBy, r.TargetGroup = relay, ""
		}
		if r.DueAt, err = d.ParseTime(due); err != nil {
			return nil, fmt.Errorf("store: delayed message %d: %w", r.ID, err)
		}
		if r.CreatedAt, err = d.ParseTime(created); err != nil {
			return nil, fmt.Errorf("store: delayed message %d: %w", r.ID, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DelayedSummary returns how many messages wait in the delayed table and
// the earliest due time (zero when none).
func DelayedSummary(ctx context.Context, db *gorm.DB) (int64, time.Time, error) {
	d, stmts, err := delayedStatements(db)
	if err != nil {
		return 0, time.Time{}, err
	}
	var n int64
	var nextDue any
	if err := db.WithContext(ctx).Raw(stmts.Summary).Row().Scan(&n, &nextDue); err != nil {
		return 0, time.Time{}, fmt.Errorf("store: delayed messages: %w", err)
	}
	next, err := d.ParseTime(nextDue)
	return n, next, err
}

// delayedStatements returns db's dialect and the statements of its
// delayed table.
func delayedStatements(db *gorm.DB) (dialect.Dialect, dialect.DelayedStatements, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, dialect.DelayedStatements{}, err
	}
	stmts, err := d.Delayed(dialect.DelayedTableDefault)
	return d, stmts, err
}

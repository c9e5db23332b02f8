package storeinfo

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
)

// ClockSkewWarning is the skew between a process's clock and its
// database's above which the scheduler warns (see ClockSkew).
const ClockSkewWarning = 30 * time.Second

// ClockSkew returns how far now, the process's clock, is ahead of the
// database server's (negative: behind), give or take the round trip. See
// the scheduler's package doc, Clocks, for why it matters.
func ClockSkew(ctx context.Context, db *gorm.DB, now func() time.Time) (time.Duration, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return 0, err
	}
	query := d.ClockQuery()
	if query == "" {
		return 0, nil
	}
	before := now()
	var micros int64
	if err := db.WithContext(ctx).Raw(query).Scan(&micros).Error; err != nil {
		return 0, fmt.Errorf("store: read the database's clock: %w", err)
	}
	after := now()
	mid := before.Add(after.Sub(before) / 2)
	return mid.Sub(time.UnixMicro(micros)), nil
}

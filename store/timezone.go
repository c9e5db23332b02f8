package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialects"
)

// ErrTimeZone is the error of a MySQL connection whose driver converts
// times to a zone other than UTC (loc=Local, say). postroom's DATETIME
// columns hold UTC without a zone, so such a connection shifts every time:
// cleanup purges inbox keys early, delayed messages come early, a
// schedule loses a slot when the clocks go back.
var ErrTimeZone = mysql.ErrTimeZone

// CheckTimeZone fails with ErrTimeZone when db, on MySQL/MariaDB, sends
// times in a zone other than UTC (a *gorm.DB not opened by Open, whose DSN
// set loc). Nothing to check on other databases.
func CheckTimeZone(ctx context.Context, db *gorm.DB) error {
	d, err := dialects.Of(db)
	if err != nil || d.TimeZoneProbe() == "" {
		return err
	}
	// A winter and a summer date: Europe/London is UTC in January only, so
	// a January date alone would pass it.
	winter, summer := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2000, 7, 1, 0, 0, 0, 0, time.UTC)
	var same int
	if err := db.WithContext(ctx).Raw(d.TimeZoneProbe(), winter, summer).Scan(&same).Error; err != nil {
		return fmt.Errorf("store: check the connection's time zone: %w", err)
	}
	if same != 1 {
		return fmt.Errorf("store: %w", ErrTimeZone)
	}
	return nil
}

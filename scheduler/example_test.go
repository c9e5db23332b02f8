package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/scheduler"
	"github.com/postroom/postroom/store"
)

// A schedule stored in the database, run on a fake clock: each slot fires
// once, with a deterministic ID for the message it emits.
func ExampleScheduler() {
	dir, _ := os.MkdirTemp("", "scheduler")
	defer os.RemoveAll(dir)
	db, _ := store.Open(filepath.Join(dir, "app.db"))
	defer store.Close(db)
	ctx := context.Background()
	_, _ = store.Migrate(ctx, db, store.Tables{})

	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	s, _ := scheduler.New(scheduler.Config{
		DB:        db,
		Now:       func() time.Time { return now },
		Schedules: []scheduler.Schedule{{Name: "nightly-report", Cron: "0 2 * * *"}},
		Emit: func(_ context.Context, _ *gorm.DB, sc scheduler.Schedule, slot time.Time) error {
			fmt.Println("emit", scheduler.SlotID(sc.Name, slot))
			return nil
		},
	})
	_ = s.Define(ctx)
	for range 4 { // two days, twice a day
		now = now.Add(12 * time.Hour)
		_, _ = s.Tick(ctx)
		_, _ = s.Tick(ctx) // a second tick in the same slot fires nothing
	}
	// Output:
	// emit schedule:nightly-report:2026-03-02T02:00:00Z
	// emit schedule:nightly-report:2026-03-03T02:00:00Z
}

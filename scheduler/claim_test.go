package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/scheduler"
)

// TestAClaimThatHangsHoldsBackItsScheduleAlone: one instance's emit of a
// slot hangs while it holds the slot's claim (a stalled broker, a paused
// process). Another instance's tick skips that schedule and fires the
// others, at once. A claim that waits for the row lock holds every
// schedule after it in the tick too: one hung emit stops every schedule on
// every instance (about half of another schedule's slots missed).
// PostgreSQL and MariaDB; SQLite locks the whole
// database for a write, so a hung emit there holds every writer.
func TestAClaimThatHangsHoldsBackItsScheduleAlone(t *testing.T) {
	for _, store := range storeDSNs[:2] { // PostgreSQL and MariaDB
		t.Run(store.name, func(t *testing.T) {
			dsn := store.dsn(t)
			open := func() *gorm.DB { return testenv.Migrated(t, dsn, store.name) } // a pool of each instance's own, on one database
			db := open()
			emitsTable(t, db)
			start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
			c := &clock{}
			c.Set(start)
			schedules := []scheduler.Schedule{{Name: "stuck", Every: time.Hour}, {Name: "a", Every: time.Hour}, {Name: "b", Every: time.Hour}}

			holding, release := make(chan struct{}), make(chan struct{})
			hang := func(ctx context.Context, tx *gorm.DB, s scheduler.Schedule, slot time.Time) error {
				if err := recordEmit(ctx, tx, s, slot); err != nil {
					return err
				}
				close(holding)
				<-release
				return nil
			}
			hung, err := scheduler.New(scheduler.Config{DB: open(), Emit: hang, Instance: "hung", Now: c.Now, Logger: testenv.Logger(t),
				Schedules: schedules[:1]})
			require.NoError(t, err)
			require.NoError(t, hung.Define(context.Background()))
			healthy := newScheduler(t, open(), c, "healthy", schedules...)
			c.Set(start.Add(time.Hour + time.Minute)) // every schedule's 11:00 slot is due

			hungDone := make(chan error, 1)
			go func() { _, err := hung.Tick(context.Background()); hungDone <- err }()
			select {
			case <-holding:
			case err := <-hungDone:
				t.Fatalf("the hung instance's tick ended before its emit: %v", err)
			}
			defer func() { // the row lock ends with the hung claim, whatever the test found
				close(release)
				require.NoError(t, <-hungDone)
			}()

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := healthy.Tick(ctx)
			require.NoError(t, err, "the healthy instance's tick waited for the hung claim")
			require.Equal(t, 2, n, "the two schedules nobody holds fired")
			require.Equal(t, map[string]int{"2026-03-01T11:00:00Z": 1}, emitted(t, db, "a"))
			require.Equal(t, map[string]int{"2026-03-01T11:00:00Z": 1}, emitted(t, db, "b"))
			require.Empty(t, emitted(t, db, "stuck"), "the hung claim has not committed")
		})
	}
}

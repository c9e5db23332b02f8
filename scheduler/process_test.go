package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/scheduler"
	"github.com/postroom/postroom/store"
)

const (
	childEnv = "POSTROOM_TEST_CHILD"
	childDSN = "POSTROOM_TEST_CHILD_DSN"
)

// runSchedulerProcess is one scheduler instance with the real clock.
func runSchedulerProcess() int {
	db, err := store.Open(os.Getenv(childDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := scheduler.New(scheduler.Config{
		DB:           db,
		Schedules:    []scheduler.Schedule{{Name: "every-second", Every: time.Second}},
		Emit:         recordEmit,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// TestThreeProcessesRealClock: three scheduler processes share one
// PostgreSQL with a one-second schedule for about ten seconds, one of them
// killed with SIGKILL and restarted on the way: every slot fires exactly
// once, none is missing between the first and the last.
func TestThreeProcessesRealClock(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	emitsTable(t, db)
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=scheduler", childDSN+"="+dsn)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	procs := []*exec.Cmd{start(), start(), start()}
	time.Sleep(4 * time.Second)
	require.NoError(t, procs[0].Process.Kill()) // SIGKILL mid-run
	_ = procs[0].Wait()
	procs[0] = start()
	time.Sleep(6 * time.Second)
	for _, p := range procs {
		require.NoError(t, p.Process.Signal(syscall.SIGTERM))
		require.NoError(t, p.Wait())
	}

	got := emitted(t, db, "every-second")
	var slots []string
	for slot, n := range got {
		require.Equal(t, 1, n, "slot %s fired %d times", slot, n)
		slots = append(slots, slot)
	}
	sort.Strings(slots)
	require.GreaterOrEqual(t, len(slots), 8, "about ten seconds of one-second slots")
	first, err := time.Parse(time.RFC3339, slots[0])
	require.NoError(t, err)
	last, err := time.Parse(time.RFC3339, slots[len(slots)-1])
	require.NoError(t, err)
	require.Equal(t, int(last.Sub(first)/time.Second)+1, len(slots), "no slot missing between %s and %s", first, last)
	var fired []string
	require.NoError(t, db.Raw("SELECT DISTINCT last_fired_by FROM postroom_schedules").Scan(&fired).Error)
	require.NotEmpty(t, fired)
}

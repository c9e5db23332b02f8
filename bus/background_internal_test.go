package bus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestAFailingBackgroundTaskStopsTheBus: a background task of Run (the
// outbox's relay, the scheduler, ...) that fails while the bus runs is
// logged at error and stops the bus, whose Run then returns the error.
// Otherwise its error waits unseen until something else stops the bus: a
// relay that died leaves every sent message in the outbox without a word.
func TestAFailingBackgroundTaskStopsTheBus(t *testing.T) {
	var logs strings.Builder
	b := &Bus{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	died := errors.New("relay died")
	done := b.startBackground(ctx, cancel, []func() error{
		func() error { return died },
		func() error { <-ctx.Done(); return ctx.Err() },
	})
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the bus ran on without its failed task")
	}
	var errs []error
	for range 2 {
		errs = append(errs, <-done)
	}
	if !errors.Is(errors.Join(errs...), died) {
		t.Fatalf("the task's error was not returned: %v", errs)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="bus: a background task failed; the bus stops" error="relay died"`) {
		t.Fatalf("no error line; logs:\n%s", logs.String())
	}
}

// TestBackgroundTasksStoppedByTheBusAreNotFailures: tasks that end with an
// error because the bus stopped (a cancelled context, or whatever their
// driver reports then) neither log an error nor cancel anything.
func TestBackgroundTasksStoppedByTheBusAreNotFailures(t *testing.T) {
	var logs strings.Builder
	b := &Bus{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	ctx, cancel := context.WithCancel(context.Background())
	done := b.startBackground(ctx, cancel, []func() error{
		func() error { <-ctx.Done(); return errors.New("interrupted (9)") },
	})
	cancel()
	<-done
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a stop logged an error:\n%s", logs.String())
	}
}

package scheduler_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The process test re-runs this test binary as a scheduler process.
	if os.Getenv(childEnv) == "scheduler" {
		os.Exit(runSchedulerProcess())
	}
	goleak.VerifyTestMain(m)
}

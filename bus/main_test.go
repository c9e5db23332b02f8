package bus_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The process tests re-run this test binary as a consumer process.
	if os.Getenv(childEnv) == "consumer" {
		os.Exit(runConsumer())
	}
	goleak.VerifyTestMain(m)
}

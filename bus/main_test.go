package bus_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The process tests re-run this test binary as a consumer process.
	switch os.Getenv(childEnv) {
	case "consumer":
		os.Exit(runConsumer())
	case "outbox":
		os.Exit(runOutboxSender())
	case "sender":
		os.Exit(runSender())
	case "external":
		os.Exit(runExternalConsumer())
	}
	goleak.VerifyTestMain(m)
}

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
	goleak.VerifyTestMain(m, ignoreFailedRouter)
}

// ignoreFailedRouter ignores the goroutine Watermill's router leaves for
// good when its Run failed at a subscribe (TestCloseAfterASubscribeFailed):
// it waits for handlers that never started. A router left running would
// still show its handlers' and subscriptions' goroutines.
var ignoreFailedRouter = goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/message.(*Router).watchAllHandlersStopped.func1")

package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pgxCleanup is pgx's goroutine closing a connection a cancelled context
// cut short (up to 15 s).
const pgxCleanup = "github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"

// VerifyTestMain is goleak.VerifyTestMain, but first waits up to 20 s
// while the only goroutines left are pgxCleanup's, which end on their own.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(20 * time.Second)
		for goleak.Find(opts...) != nil && goleak.Find(append(opts, goleak.IgnoreAnyFunction(pgxCleanup))...) == nil &&
			time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

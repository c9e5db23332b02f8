package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pgxCleanup is the goroutine in which pgx closes a connection whose
// statement a cancelled context cut short: it sends Terminate and drains
// what the server still sends, for 15 s at most (pgconn.asyncClose).
const pgxCleanup = "github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"

// VerifyTestMain runs the tests and fails them if goroutines are left, as
// goleak.VerifyTestMain does, but first waits, up to 20 s, while the only
// goroutines left are pgx's closing connections a stop cut short: they end
// on their own, and on a loaded machine later than goleak's 2 s of
// retries.
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

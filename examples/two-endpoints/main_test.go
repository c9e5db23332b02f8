package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// TestBothProcesses runs the example as `go run ./examples/two-endpoints`
// does, without an argument: billing and sales as two processes on the
// shared RabbitMQ and PostgreSQL. It prints its result only when every
// order's event came back once and billing wrote one invoice for each;
// otherwise it exits with status 1 (TestCheck: what it counts as lost or
// doubled).
func TestBothProcesses(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.RequireAMQP(t)
	dsn := testenv.PostgresSchemaDSN(t) // the example makes a schema of its own beside it

	bin := filepath.Join(t.TempDir(), "two-endpoints")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "POSTROOM_POSTGRES_DSN="+dsn, "POSTROOM_AMQP_URL="+amqpURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("ran in %s:\n%s%s", time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	require.NoError(t, err, "the example failed: %s", stderr.String())
	require.Equal(t, strings.Join([]string{
		"billing and sales: two processes, two endpoints, on RabbitMQ and PostgreSQL",
		"sales: sent 10 orders, each twice with one message ID",
		"billing: 10 invoices, one per order; 10 duplicates skipped by its inbox",
		"sales: 10 InvoiceCreated events back, one per order",
		"rabbitmq: deleted the 8 queues and 4 exchanges it declared for its endpoints",
	}, "\n")+"\n", stdout.String())
}

// TestCheck: an order whose event is lost or comes back twice, or that has
// no invoice or two, fails the run, and so does an event for an order
// that was not sent.
func TestCheck(t *testing.T) {
	t.Parallel()
	sent := []string{"order-1", "order-2"}
	once := map[string]int{"order-1": 1, "order-2": 1}
	require.NoError(t, check(2, sent, once, once))

	for _, c := range []struct {
		name             string
		orders           int
		events, invoices map[string]int
		want             string
	}{
		{"an event lost", 2, map[string]int{"order-1": 1}, once, "order-2: InvoiceCreated came back 0 times"},
		{"an event doubled", 2, map[string]int{"order-1": 1, "order-2": 2}, once, "order-2: InvoiceCreated came back 2 times"},
		{"an invoice doubled", 2, once, map[string]int{"order-1": 2, "order-2": 1}, "order-1: 2 invoices"},
		{"an invoice missing", 2, once, map[string]int{"order-1": 1}, "order-2: 0 invoices"},
		{"an event of another order", 2, map[string]int{"order-1": 1, "order-2": 1, "order-9": 1}, once, "order-9: an InvoiceCreated for an order sales did not send"},
		{"an order not sent", 3, once, once, "sales sent 2 orders, not 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := check(c.orders, sent, c.events, c.invoices)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

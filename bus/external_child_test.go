package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
)

// The external-effects consumer process: it handles Charge by calling the
// test's payment server with the message's idempotency key.
const (
	childAPI        = "POSTROOM_TEST_CHILD_API"         // the payment server's URL
	childPolicy     = "POSTROOM_TEST_CHILD_POLICY"      // "park" or "retry"
	childErrorTopic = "POSTROOM_TEST_CHILD_ERROR_TOPIC" // the endpoint's error topic
)

// externalLease is the claim lease of the external-effects processes: short,
// so a test waits little for a dead attempt's lease to run out.
const externalLease = 2 * time.Second

// Charge asks for a payment.
type Charge struct{ N int }

func (Charge) MessageName() string { return "test.Charge" }

func runExternalConsumer() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "external consumer:", err); return 2 }
	db, tr, err := childDeps()
	if err != nil {
		return fail(err)
	}
	policy := inbox.Park
	if os.Getenv(childPolicy) == "retry" {
		policy = inbox.Retry
	}
	counters := &metrics.Counters{}
	b, err := bus.New(bus.Config{
		Endpoint: os.Getenv(childEP), Transport: tr, DB: db, ErrorTopic: os.Getenv(childErrorTopic),
		Concurrency: 2,
		Retry:       bus.RetryPolicy{MaxRetries: 2, InitialBackoff: 50 * time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})),
		Cleanup:     bus.CleanupSchedule{Disabled: true}, Metrics: bus.Metrics{Recorder: counters},
	})
	if err != nil {
		return fail(err)
	}
	api := os.Getenv(childAPI)
	err = bus.Handle(b, func(ctx context.Context, c *Charge) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api, strings.NewReader(strconv.Itoa(c.N)))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", inbox.IdempotencyKey(ctx))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("payment API: %s", resp.Status)
		}
		return nil
	}, bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{OnUnknown: policy, Lease: externalLease}}))
	if err != nil {
		return fail(err)
	}
	if err := serveUntilTerm(b, counters); err != nil {
		return fail(err)
	}
	return 0
}

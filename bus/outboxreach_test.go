package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestOutboxMessagesOfAnotherTransportAreSaidAtError: two services share a
// database, each with the outbox, on transports that do not reach each
// other (here two in-memory brokers; in production two RabbitMQ brokers or
// vhosts, or RabbitMQ and the SQL transport). Each relay publishes some
// of the other's messages on its own transport, where they do not belong
// (a hole, docs/guarantees.md: give such services a database each); it
// must say so at error, naming both reaches. Before, it did silently: 13
// of 20 events reached the wrong service (found by a review).
func TestOutboxMessagesOfAnotherTransportAreSaidAtError(t *testing.T) {
	db := testenv.Postgres(t)
	logs := newRecordedLogs()
	const n = 20
	var handled atomic.Int32
	for _, name := range []string{testenv.Name("billing"), testenv.Name("shipping")} {
		b, err := bus.New(bus.Config{Endpoint: name, Transport: gochannel.New(gochannel.Config{}), DB: db, Outbox: true,
			Logger: slog.New(logs), Cleanup: bus.CleanupSchedule{Disabled: true}})
		require.NoError(t, err)
		require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
			return bus.Publish(ctx, b, &ConfRelayed{From: fmt.Sprint(name, m.N)})
		}, bus.WithInbox())) // in a transaction: through the outbox
		require.NoError(t, bus.Handle(b, func(context.Context, *ConfRelayed) error { handled.Add(1); return nil }))
		testbus.Run(t, b)
		for k := range n {
			require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: k}))
		}
	}
	require.Eventually(t, func() bool { return handled.Load() == 2*n }, 20*time.Second, 10*time.Millisecond)
	line, count := logs.find(slog.LevelError, "may not reach the same subscribers")
	require.NotZero(t, count, "a relay published another service's messages on its own transport without a word")
	// The fields come from a map (watermill.LogFields): their order is not fixed.
	msgReach := regexp.MustCompile(`message_reach=@(billing|shipping)\w+`).FindStringSubmatch(line)
	relayReach := regexp.MustCompile(`relay_reach=@(billing|shipping)\w+`).FindStringSubmatch(line)
	require.NotNil(t, msgReach, line)
	require.NotNil(t, relayReach, line)
	require.NotEqual(t, msgReach[1], relayReach[1], "the line must name both services' reaches: %s", line)
}

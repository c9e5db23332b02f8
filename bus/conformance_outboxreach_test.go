package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/gochannel"
	wsql "github.com/postroom/postroom/transport/sql"
)

// reachSaid is what a relay says at error when it published a message
// written by a service whose transport may not reach the same subscribers.
const reachSaid = "may not reach the same subscribers"

// pair is two services on one database, each with the outbox.
type pair struct {
	handled   atomic.Int32 // events handled, by either service
	misrouted atomic.Int32 // events handled by the service that did not write them
	logs      *recordedLogs
	buses     []*bus.Bus
}

// send sends n commands to each service, numbered from first.
func (p *pair) send(t *testing.T, first, n int) {
	for _, b := range p.buses {
		for k := first; k < first+n; k++ {
			require.NoError(t, bus.Send(context.Background(), b, &ConfCmd{N: k}, bus.To(b.Endpoint())))
		}
	}
}

// outboxPair runs two services on the check's database, each with the
// outbox, on the transports trs gives them; each handles n commands by
// publishing an event, and handles the events.
func outboxPair(t *testing.T, c *confCase, trs func() [2]transport.Transport, n int) *pair {
	p := &pair{logs: newRecordedLogs()}
	for i, tr := range trs() {
		name := testenv.Name([]string{"billing", "shipping"}[i])
		b := newConfBus(t, c, func(cfg *bus.Config) {
			cfg.Endpoint, cfg.Transport, cfg.Outbox, cfg.Logger = name, tr, true, slog.New(p.logs)
		})
		require.NoError(t, bus.Handle(b, func(ctx context.Context, m *ConfCmd) error {
			return bus.Publish(ctx, b, &ConfRelayed{From: fmt.Sprint(name, "/", m.N)})
		}, bus.WithInbox())) // in a transaction: through the outbox
		require.NoError(t, bus.Handle(b, func(_ context.Context, m *ConfRelayed) error {
			if !strings.HasPrefix(m.From, name+"/") {
				p.misrouted.Add(1)
			}
			p.handled.Add(1)
			return nil
		}))
		run(t, b)
		p.buses = append(p.buses, b)
	}
	// Both run before the first event: a subscriber that did not exist
	// when an event was published does not get it, on any transport.
	p.send(t, 0, n)
	return p
}

// checkOutboxSharedQuiet: two services share the database and the
// transport, each with the outbox: each relay publishes messages the other
// wrote, which is right, since they reach the same subscribers. Every event
// reaches both services, and nothing is said at error.
func checkOutboxSharedQuiet(t *testing.T, c *confCase) {
	const n = 10
	p := outboxPair(t, c, func() [2]transport.Transport { return [2]transport.Transport{c.tr, c.tr} }, n)
	waitFor(t, "each event handled by both services", func() bool { return p.handled.Load() >= 2*2*n })
	time.Sleep(300 * time.Millisecond) // room for a wrong extra delivery
	require.EqualValues(t, 2*2*n, p.handled.Load(), "each event handled once by each service")
	line, count := p.logs.find(slog.LevelError, "")
	require.Zero(t, count, "said at error: %s", line)
}

// checkOutboxOtherReachSaid: two services share a database, each with the
// outbox, on transports that do not reach each other: the check's and an
// in-memory one (on the in-memory column, the SQL transport; in
// production two RabbitMQ brokers or vhosts, or RabbitMQ and the SQL
// transport). Each relay publishes some of the other's messages on its
// own transport, where they do not belong (a hole, docs/guarantees.md:
// give such services a database each); it must say so at error, naming
// both reaches. Otherwise events reach the wrong service (most of them
// here) without a word.
func checkOutboxOtherReachSaid(t *testing.T, c *confCase) {
	const n, rounds = 10, 10
	p := outboxPair(t, c, func() [2]transport.Transport {
		if c.transport.name != "gochannel" {
			return [2]transport.Transport{c.tr, gochannel.New(gochannel.Config{})}
		}
		other, err := wsql.New(wsql.Config{DB: c.db, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close() })
		return [2]transport.Transport{c.tr, other}
	}, n)
	// Which relay reads a row is a race: in a round, each relay may happen
	// to read only its own service's rows (then nothing needs saying).
	// Rounds go on until an event went through the other service's relay:
	// a single round can end with no row crossed, and the check would then
	// fail for nothing.
	for round := 1; ; round++ {
		waitFor(t, "each event handled once, by whichever service's transport it reached", func() bool { return p.handled.Load() == int32(2*n*round) })
		if p.misrouted.Load() > 0 {
			break
		}
		require.Less(t, round, rounds, "in %d rounds of %d events, no relay read the other service's rows: the check could not look", rounds, 2*n)
		p.send(t, round*n, n)
	}
	line, count := p.logs.find(slog.LevelError, reachSaid)
	require.NotZero(t, count, "a relay published %d of the other service's messages on its own transport without a word", p.misrouted.Load())
	// The fields come from a map (watermill.LogFields): their order is not fixed.
	msgReach := regexp.MustCompile(`message_reach=(\S+)`).FindStringSubmatch(line)
	relayReach := regexp.MustCompile(`relay_reach=(\S+)`).FindStringSubmatch(line)
	require.NotNil(t, msgReach, line)
	require.NotNil(t, relayReach, line)
	require.NotEqual(t, msgReach[1], relayReach[1], "the line must name both reaches: %s", line)
	require.Contains(t, msgReach[1]+" "+relayReach[1], "memory@", "one of them the in-memory transport's: %s", line)
}

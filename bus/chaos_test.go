package bus_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/middleware/unitofwork"
)

var chaosLong = flag.Bool("chaos.long", false, "run the long chaos test: 20,000 messages, a kill every 1 to 3 seconds")

var chaosAll = flag.Bool("chaos.all", false, "run the chaos test on every store × transport with an outbox and more than one process (PostgreSQL and MariaDB, each with RabbitMQ and the SQL transport), not only PostgreSQL + RabbitMQ")

// TestChaos: four consumer processes compete on RabbitMQ with PostgreSQL,
// 30% of the messages are re-published duplicates, and a controller SIGKILLs
// a random consumer every so often and starts a new one. At the end every
// message has exactly one business row, none missing, none doubled, and the
// event each handler sent through the outbox reached a downstream endpoint
// exactly once. It runs with a transaction per message, with the
// consumers' handler committing batches of up to 16 messages (WithBatch),
// and with a batch handler (HandleBatch) taking batches of up to 16.
// Short by default (about half a minute each); -chaos.long runs the
// 20,000-message version. It runs on PostgreSQL + RabbitMQ; -chaos.all
// runs it on MariaDB and on the SQL transport too (about 15 minutes more,
// so not in `make test`; docs/guarantees.md has the last run's figures).
func TestChaos(t *testing.T) {
	for _, combo := range processCombos {
		if combo.store == "sqlite" { // no outbox on SQLite
			continue
		}
		if combo != (processCombo{"postgres", "amqp"}) && !*chaosAll {
			continue
		}
		for _, tc := range []struct {
			name    string
			batch   int
			batchFn bool
		}{{"a transaction per message", 0, false}, {"batches of up to 16", 16, false}, {"a batch handler, batches of up to 16", 16, true}} {
			name := tc.name
			if combo != (processCombo{"postgres", "amqp"}) {
				name = combo.String() + "/" + name // the names the docs cite stay
			}
			t.Run(name, func(t *testing.T) { chaos(t, combo, tc.batch, tc.batchFn) })
		}
	}
}

func chaos(t *testing.T, combo processCombo, batch int, batchFn bool) {
	messages, minKill, maxKill := 4000, 300*time.Millisecond, 900*time.Millisecond
	if *chaosLong {
		messages, minKill, maxKill = 20000, time.Second, 3*time.Second
	}
	p := newProcessSetupOn(t, combo).withSender(t)
	// The event topic test.WorkDone is shared on RabbitMQ with every test
	// that publishes it (the fault tests run beside the suite): done
	// records each event's source endpoint, and only this run's count.
	require.NoError(t, p.db.Exec("CREATE TABLE done (n INTEGER NOT NULL, source VARCHAR(200) NOT NULL)").Error)

	tr := p.newTransport(t)
	downstream, err := bus.New(bus.Config{Endpoint: testenv.Name("audit"), Transport: tr, DB: p.db, Logger: testenv.Logger(t),
		Concurrency: 4, Cleanup: bus.CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(downstream, func(ctx context.Context, d *WorkDone) error {
		return unitofwork.Tx(ctx).Exec("INSERT INTO done (n, source) VALUES (?, ?)", d.N, bus.Metadata(ctx)[metadata.SourceEndpoint]).Error
	}, bus.WithInbox()))
	start(t, downstream, "error")

	require.NoError(t, os.Setenv(childOutbox, "1"))
	require.NoError(t, os.Setenv(childBatch, strconv.Itoa(batch)))
	require.NoError(t, os.Setenv(childBatchFn, map[bool]string{true: "1", false: ""}[batchFn]))
	t.Cleanup(func() { os.Unsetenv(childOutbox); os.Unsetenv(childBatch); os.Unsetenv(childBatchFn) })
	consumers := make([]*consumer, 4)
	for i := range consumers {
		consumers[i] = p.start(t, "consumer", 0)
	}

	var senders sync.WaitGroup
	for part := range 4 {
		senders.Go(func() {
			for n := part; n < messages; n += 4 {
				p.send(t, n)
				if n%10 < 3 {
					p.send(t, n)
				}
			}
		})
	}
	ctx, stopKilling := context.WithCancel(context.Background())
	kills := 0
	var killer sync.WaitGroup
	killer.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(minKill + time.Duration(rng.Int64N(int64(maxKill-minKill)))):
			}
			i := rng.IntN(len(consumers))
			_ = consumers[i].cmd.Process.Kill()
			_ = consumers[i].cmd.Wait()
			consumers[i] = p.start(t, "consumer", 0)
			kills++
		}
	})
	senders.Wait()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, distinct := p.effects(t)
		var done int64
		require.NoError(t, p.db.Raw("SELECT COUNT(DISTINCT n) FROM done WHERE source = ?", p.endpoint).Scan(&done).Error)
		if distinct == int64(messages) && done == int64(messages) {
			break
		}
		require.True(t, time.Now().Before(deadline), "chaos run did not converge: %d/%d effects, %d/%d events", distinct, messages, done, messages)
		time.Sleep(100 * time.Millisecond)
	}
	stopKilling()
	killer.Wait()
	for _, c := range consumers {
		c.stop(t)
	}
	time.Sleep(time.Second) // room for a late duplicate downstream
	rows, distinct := p.effects(t)
	var doneRows int64
	require.NoError(t, p.db.Raw("SELECT COUNT(*) FROM done WHERE source = ?", p.endpoint).Scan(&doneRows).Error)
	t.Logf("chaos on %s: %d messages (+30%% duplicates), %d kills, batches of up to %d, batch handler %t", combo, messages, kills, max(batch, 1), batchFn)
	require.Greater(t, kills, 0, "the controller killed consumers")
	require.EqualValues(t, messages, distinct, "none missing")
	require.EqualValues(t, messages, rows, "none doubled")
	require.EqualValues(t, messages, doneRows, "every outbox event exactly once downstream")
}

package bus

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestStrandedDelayedMessagesAreSaid, on each store: delayed deliveries
// overdue for a bus of another reach or endpoint are said at warn, with
// how many and how late, once per strandedRepeat; this bus's own and a
// handler's delayed retries are not.
func TestStrandedDelayedMessagesAreSaid(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			logs := &syncBuffer{}
			now := time.Now().UTC()
			var later atomic.Int64 // how far the bus's clock has moved past now
			b, err := New(Config{Endpoint: testenv.Name("billing"), Transport: gochannel.New(gochannel.Config{}), DB: db,
				DelayedPollInterval: 20 * time.Millisecond, Now: func() time.Time { return now.Add(time.Duration(later.Load())) },
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			require.NoError(t, err)
			d, stmts, err := b.delayedStatements(db)
			require.NoError(t, err)
			insert := func(group string, due time.Time) {
				require.NoError(t, db.Exec(stmts.Insert, d.Time(due), "some.topic", group, testenv.Name("m-"), []byte("{}"), "{}", d.Time(due)).Error)
			}
			other := dialect.DelayedByReach("amqp://localhost:5672/%2F")
			insert(other, now.Add(-5*time.Minute))
			insert(other, now.Add(-2*time.Minute))
			insert(other, now.Add(-30*time.Second))            // not overdue long enough to be said
			insert("someone/handler", now.Add(-5*time.Minute)) // a delayed retry of another endpoint's handler
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan error, 1)
			go func() { stopped <- b.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				require.NoError(t, <-stopped)
			})
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "overdue") }, 10*time.Second, 10*time.Millisecond)
			time.Sleep(200 * time.Millisecond) // several polls
			out := logs.String()
			require.Contains(t, out, `messages=2 overdue_by=5m0s published_by="transport amqp://localhost:5672/%2F" this_bus_publishes="endpoint `+b.cfg.Endpoint+`"`)
			require.Equal(t, 1, strings.Count(out, "waiting for a bus that publishes them"), "nothing of the handler's retry: %s", out)

			said := func() int { return strings.Count(logs.String(), "waiting for a bus that publishes them") }
			later.Store(int64(2 * time.Minute)) // looked at again, not said again before strandedRepeat
			time.Sleep(200 * time.Millisecond)
			require.Equal(t, 1, said())
			later.Store(int64(11 * time.Minute))
			require.Eventually(t, func() bool { return said() == 2 }, 10*time.Second, 10*time.Millisecond, "said again after strandedRepeat")
			require.Contains(t, logs.String(), `messages=3 overdue_by=16m0s`, "the third one too, by then")
		})
	}
}

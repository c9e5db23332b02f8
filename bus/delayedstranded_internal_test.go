package bus

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestStrandedDelayedMessagesAreSaid, on each store: delayed deliveries
// overdue by more than strandedAfter for a bus of another reach or
// endpoint are said at warn, with how many and how late, at most once per
// strandedRepeat; this bus's own, a handler's delayed retries and those
// overdue by less are not.
func TestStrandedDelayedMessagesAreSaid(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			logger, logs := testenv.CapturedLogger(slog.LevelWarn)
			start := time.Now().UTC().Truncate(time.Second)
			now := start
			b, err := New(Config{Endpoint: testenv.Name("billing"), Transport: gochannel.New(gochannel.Config{}), DB: db,
				Now: func() time.Time { return now }, Logger: logger})
			require.NoError(t, err)
			d, stmts, err := b.delayedStatements(db)
			require.NoError(t, err)
			insert := func(group string, due time.Time) {
				require.NoError(t, db.Exec(stmts.Insert, d.Time(due), "some.topic", group, testenv.Name("m-"), []byte("{}"), "{}", d.Time(due)).Error)
			}
			other := dialect.DelayedByReach("amqp://localhost:5672/%2F")
			insert(other, start.Add(-10*time.Minute))
			insert(other, start.Add(-6*time.Minute))
			insert(other, start.Add(-time.Minute))                // not overdue long enough to be said
			insert(b.delayedRelay(), start.Add(-10*time.Minute))  // this bus publishes it
			insert("someone/handler", start.Add(-10*time.Minute)) // a delayed retry of another endpoint's handler
			said := func() int { return strings.Count(logs.String(), "waiting for a bus that publishes them") }
			s := &strandedDelayed{said: map[string]time.Time{}}
			ctx := context.Background()

			s.check(ctx, b)
			require.Equal(t, 1, said(), logs.String())
			require.Contains(t, logs.String(), `messages=2 overdue_by=10m0s published_by="transport amqp://localhost:5672/%2F" this_bus_publishes="endpoint `+b.cfg.Endpoint+`"`)
			now = start.Add(2 * time.Minute) // looked at again, not said again before strandedRepeat
			s.check(ctx, b)
			require.Equal(t, 1, said())
			now = start.Add(11 * time.Minute)
			s.check(ctx, b)
			require.Equal(t, 2, said(), "said again after strandedRepeat")
			require.Contains(t, logs.String(), `messages=3 overdue_by=21m0s`, "the third one too, by then")
		})
	}
}

package sql_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	wsql "github.com/postroom/postroom/transport/sql"
)

// ackedAroundAStop: each message is acked just before its subscription's
// context ends, or after (a handler finishing during a stop); none is
// delivered again. A read that ends with the context rolls the ack back:
// every message is redelivered, either way; and a read that only outlives
// the context still redelivers most of those acked just before the stop.
func ackedAroundAStop(t *testing.T, ackBeforeCancel bool) (stops []time.Duration) {
	db := testenv.Postgres(t)
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer tr.Close()
	topic := testenv.Name("stop_")
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	dups := 0
	const rounds = 10
	for i := 0; i < rounds; i++ {
		id := fmt.Sprint("m", i)
		require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(id, []byte("{}"))))
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		var m *message.Message
		for m = range ch {
			if m.UUID == id {
				break
			}
			m.Ack() // a redelivered earlier one
			dups++
		}
		if ackBeforeCancel {
			m.Ack()
			cancel()
		} else {
			cancel()
			time.Sleep(50 * time.Millisecond)
			m.Ack()
		}
		stopped := time.Now()
		for range ch {
		}
		stops = append(stops, time.Since(stopped))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	for {
		select {
		case m := <-ch:
			m.Ack()
			dups++
			continue
		case <-time.After(time.Second):
		}
		break
	}
	if dups > 0 {
		t.Fatalf("%d of %d messages acked around a stop were delivered again", dups, rounds)
	}
	return stops
}

func TestAnAckAfterAStopHolds(t *testing.T) { ackedAroundAStop(t, false) }

// TestAnAckJustBeforeAStopHolds, and the stop ends once the ack is
// committed: the subscription follows the transaction that read the
// message. A subscription that, with nothing more to read, waits the
// whole ackCommitGrace for a next read delays every stop right after a
// message by that grace.
// The median of ten is checked against 500 ms, far above a commit on a
// loaded machine and a tenth of the grace.
func TestAnAckJustBeforeAStopHolds(t *testing.T) {
	stops := ackedAroundAStop(t, true)
	slices.Sort(stops)
	if median := stops[len(stops)/2]; median >= 500*time.Millisecond {
		t.Fatalf("a stop right after an ack took %s (median of %v): it waited for the grace, not for the commit", median, stops)
	}
}

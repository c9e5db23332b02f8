package sql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	wsql "github.com/postroom/postroom/transport/sql"
)

// ackedAroundAStop: each message is acked just before its subscription's
// context ends, or after (a handler finishing during a stop); none is
// delivered again. Before, watermill-sql's read ended with the context and
// rolled the ack back: 20 of 20 redelivered either way, and 16 of 20 acked
// just before the stop after the read first outlived the context (found
// by a review).
func ackedAroundAStop(t *testing.T, ackBeforeCancel bool) {
	db := testenv.Postgres(t)
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer tr.Close()
	topic := testenv.Name("stop_")
	sub, err := tr.Subscriber("g")
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
		for range ch {
		}
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
}

func TestAnAckJustBeforeAStopHolds(t *testing.T) { ackedAroundAStop(t, true) }
func TestAnAckAfterAStopHolds(t *testing.T)      { ackedAroundAStop(t, false) }

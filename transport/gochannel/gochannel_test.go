package gochannel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/transport/gochannel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGroupsCompeteAndEachGroupGetsEverything: two subscriptions of group a
// share the topic's messages, group b gets them all, and a nacked message
// comes back.
func TestGroupsCompeteAndEachGroupGetsEverything(t *testing.T) {
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subA, _ := tr.Subscriber("a")
	subB, _ := tr.Subscriber("b")
	a1, err := subA.Subscribe(ctx, "t")
	require.NoError(t, err)
	a2, err := subA.Subscribe(ctx, "t")
	require.NoError(t, err)
	b, err := subB.Subscribe(ctx, "t")
	require.NoError(t, err)

	var mu sync.Mutex
	seen := map[string][]string{}
	nacked := false
	consume := func(name string, ch <-chan *message.Message) {
		for msg := range ch {
			mu.Lock()
			if name == "a1" && !nacked {
				nacked = true
				mu.Unlock()
				msg.Nack()
				continue
			}
			seen[name] = append(seen[name], msg.UUID)
			mu.Unlock()
			time.Sleep(time.Millisecond) // let the other subscription take some
			msg.Ack()
		}
	}
	go consume("a1", a1)
	go consume("a2", a2)
	go consume("b", b)
	const n = 50
	for i := range n {
		require.NoError(t, tr.Publisher().Publish("t", message.NewMessage(fmt.Sprint(i), nil)))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["a1"])+len(seen["a2"]) == n && len(seen["b"]) == n
	}, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen["a1"])
	require.NotEmpty(t, seen["a2"])
	require.True(t, nacked)
}

// TestPublishNeverBlocks: a handler that sends to its own queue while every
// subscription is busy must not wait for itself. Publishing to a topic whose
// only subscription takes nothing returns at once, and every message is
// then delivered in order.
func TestPublishNeverBlocks(t *testing.T) {
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, _ := tr.Subscriber("a")
	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	const n = 10_000
	published := make(chan error, 1)
	go func() {
		for i := range n {
			if err := tr.Publisher().Publish("t", message.NewMessage(fmt.Sprint(i), nil)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	select {
	case err := <-published:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked while the subscription took nothing")
	}
	for i := range n {
		msg := <-ch
		require.Equal(t, fmt.Sprint(i), msg.UUID)
		msg.Ack()
	}
	require.NoError(t, tr.Publisher().Publish("nobody-listens", message.NewMessage("x", nil)), "dropped, not an error")
}

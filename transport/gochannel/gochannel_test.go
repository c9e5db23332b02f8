package gochannel_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/transport"
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
	subA, _ := tr.Subscriber("a", 1)
	subB, _ := tr.Subscriber("b", 1)
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
	tr, sub, ctx := groupA(t)
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

// receive reads one message from ch, failing after a second.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "channel closed")
		return msg
	case <-time.After(time.Second):
		t.Fatal("no message")
		return nil
	}
}

// nothing fails if ch yields a message within 50ms.
func nothing(t *testing.T, ch <-chan *message.Message) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s", msg.UUID)
		}
	case <-time.After(50 * time.Millisecond):
	}
}

func closedCh(t *testing.T, ch <-chan *message.Message) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.False(t, ok, "got %v, want the channel closed", msg)
	default:
		t.Fatal("channel not closed")
	}
}

func publish(t *testing.T, tr *gochannel.Transport, topic string, uuids ...string) {
	t.Helper()
	for _, id := range uuids {
		require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(id, nil)))
	}
}

// TestQueueExistsFromSubscribeInitialize: messages published before a group
// subscribes are kept once the group has declared the topic, by
// SubscribeInitialize or by an earlier subscription; a topic no group has
// declared drops them, and PublishMandatory says so.
func TestQueueExistsFromSubscribeInitialize(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	err := tr.PublishMandatory("t", message.NewMessage("lost", nil))
	require.ErrorIs(t, err, transport.ErrNoRoute)
	publish(t, tr, "t", "dropped")

	sub, err := tr.Subscriber("a", 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize("t"))
	publish(t, tr, "t", "1")
	require.NoError(t, tr.PublishMandatory("t", message.NewMessage("2", nil)))

	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	for _, want := range []string{"1", "2"} {
		msg := receive(t, ch)
		require.Equal(t, want, msg.UUID)
		msg.Ack()
	}
	nothing(t, ch)

	// Group b declares the topic by subscribing; its queue stays after the
	// subscription ends.
	subB, _ := tr.Subscriber("b", 1)
	ctxB, cancelB := context.WithCancel(ctx)
	chB, err := subB.Subscribe(ctxB, "t")
	require.NoError(t, err)
	cancelB()
	for range chB {
	}
	publish(t, tr, "t", "3")
	chB, err = subB.Subscribe(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, "3", receive(t, chB).UUID)
	require.Equal(t, "3", receive(t, ch).UUID, "group a gets it too")
}

// TestHeldMessageIsSettledAfterItsSubscriptionEnds: when a subscription's
// context ends, its channel closes and its held message's context is
// cancelled, but the message stays with its handler: a nack sends it to
// another subscription, an ack settles it for good (a stopping bus lets
// the messages in flight finish). The subscriber's Close gives back what
// an ended subscription still holds. Handed to the other subscription at
// once, the held message would run there while its first handler still
// runs.
func TestHeldMessageIsSettledAfterItsSubscriptionEnds(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	sub, _ := tr.Subscriber("a", 1)
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ch1, err := sub.Subscribe(ctx1, "t")
	require.NoError(t, err)
	publish(t, tr, "t", "1", "2")
	held := receive(t, ch1)
	require.Equal(t, "1", held.UUID)

	other, _ := tr.Subscriber("a", 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ch2, err := other.Subscribe(ctx2, "t")
	require.NoError(t, err)
	msg := receive(t, ch2)
	require.Equal(t, "2", msg.UUID)
	msg.Ack()
	nothing(t, ch2)

	cancel1()
	select {
	case <-held.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the held message's context is not cancelled when its subscription ends")
	}
	closes(t, ch1)
	nothing(t, ch2) // still its handler's
	held.Nack()
	msg = receive(t, ch2)
	require.Equal(t, "1", msg.UUID, "nacked after its subscription ended, it goes to the other")

	// Acked after its subscription ended: settled, not delivered again.
	cancel2()
	closes(t, ch2)
	msg.Ack()
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	ch3, err := other.Subscribe(ctx3, "t")
	require.NoError(t, err)
	nothing(t, ch3)

	// The subscriber's Close gives back what an ended subscription holds.
	publish(t, tr, "t", "4")
	held = receive(t, ch3)
	cancel3()
	closes(t, ch3)
	require.NoError(t, other.Close())
	third, _ := tr.Subscriber("a", 1)
	ch4, err := third.Subscribe(context.Background(), "t")
	require.NoError(t, err)
	msg = receive(t, ch4)
	require.Equal(t, "4", msg.UUID, "given back by Close")
	msg.Ack()
	held.Ack() // too late: given back
	nothing(t, ch4)
}

// closes fails unless ch is closed within a second, without a message.
func closes(t *testing.T, ch <-chan *message.Message) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.False(t, ok, "got %v, want the channel closed", msg)
	case <-time.After(time.Second):
		t.Fatal("channel not closed")
	}
}

// TestStalledSubscriptionHoldsNothing: subscriptions nobody reads, free
// longer than the one that reads, do not keep messages from it: one, and
// more than the dispatcher offers a message to at once (they move to the
// back of the free list after reofferAfter, also while publishes every
// millisecond wake the dispatcher sooner).
func TestStalledSubscriptionHoldsNothing(t *testing.T) {
	for _, stalled := range []int{1, 20} {
		t.Run(fmt.Sprintf("stalled=%d", stalled), func(t *testing.T) {
			t.Parallel()
			tr, sub, ctx := groupA(t)
			for range stalled {
				_, err := sub.Subscribe(ctx, "t") // never read
				require.NoError(t, err)
			}
			ch, err := sub.Subscribe(ctx, "t")
			require.NoError(t, err)
			publish(t, tr, "t", "1", "2", "3")
			for _, want := range []string{"1", "2", "3"} {
				msg := receive(t, ch)
				require.Equal(t, want, msg.UUID)
				msg.Ack()
			}

			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
						_ = tr.Publisher().Publish("t", message.NewMessage(fmt.Sprint("tick-", i), nil))
					}
				}
			}()
			for range 3 {
				receive(t, ch).Ack()
			}
		})
	}
}

// TestNackedWhileAnotherIsTakenIsKept: competing subscriptions nack a
// third of what they get, at random, while the others take the messages
// behind: every message is acked exactly once. (A nacked message put back
// at the head while the next one was being taken made the dispatcher
// remove the nacked one instead: it was never delivered again, and the
// other was delivered twice.)
func TestNackedWhileAnotherIsTakenIsKept(t *testing.T) {
	t.Parallel()
	tr, sub, ctx := groupA(t)
	const n = 3000
	var mu sync.Mutex
	acked := map[string]int{}
	done := make(chan struct{})
	for w := range 4 {
		ch, err := sub.Subscribe(ctx, "t")
		require.NoError(t, err)
		go func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for msg := range ch {
				if rnd.IntN(3) == 0 {
					msg.Nack()
					continue
				}
				msg.Ack()
				mu.Lock()
				acked[msg.UUID]++
				if len(acked) == n {
					close(done)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		require.NoError(t, tr.Publisher().Publish("t", message.NewMessage(fmt.Sprint(i), nil)))
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages acked; the others were lost", len(acked), n)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, count := range acked {
		require.Equal(t, 1, count, "message %s acked more than once", id)
	}
}

// TestNackGoesBackToTheHead: one subscription gets a nacked message again
// before the ones behind it, and the next only after an ack.
func TestNackGoesBackToTheHead(t *testing.T) {
	t.Parallel()
	tr, sub, ctx := groupA(t)
	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	publish(t, tr, "t", "1", "2")
	msg := receive(t, ch)
	require.Equal(t, "1", msg.UUID)
	nothing(t, ch)
	msg.Nack()
	select {
	case <-msg.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the context of a nacked message is not cancelled")
	}
	msg = receive(t, ch)
	require.Equal(t, "1", msg.UUID)
	msg.Ack()
	select {
	case <-msg.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the context of an acked message is not cancelled")
	}
	require.Equal(t, "2", receive(t, ch).UUID)
}

// TestSubscriberClose ends the subscriber's subscriptions: their channels
// are closed when Close returns, the message held goes to another
// subscriber of the group, and the closed subscriber refuses to subscribe.
func TestSubscriberClose(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub1, _ := tr.Subscriber("a", 1)
	sub2, _ := tr.Subscriber("a", 1)
	ch1, err := sub1.Subscribe(ctx, "t")
	require.NoError(t, err)
	ch1b, err := sub1.Subscribe(ctx, "other")
	require.NoError(t, err)
	publish(t, tr, "t", "1")
	held := receive(t, ch1)

	require.NoError(t, sub1.Close())
	closedCh(t, ch1)
	closedCh(t, ch1b)
	require.Error(t, held.Context().Err(), "the held message's context is cancelled")
	_, err = sub1.Subscribe(ctx, "t")
	require.ErrorIs(t, err, gochannel.ErrClosed)
	require.ErrorIs(t, sub1.(message.SubscribeInitializer).SubscribeInitialize("t"), gochannel.ErrClosed)

	ch2, err := sub2.Subscribe(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, "1", receive(t, ch2).UUID)
}

// TestPublishAfterClose: a closed publisher refuses to publish (the others
// go on); a closed transport refuses everything and ends its subscriptions.
func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	sub, _ := tr.Subscriber("a", 1)
	ch, err := sub.Subscribe(context.Background(), "t")
	require.NoError(t, err)

	pub := tr.Publisher()
	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("t", message.NewMessage("1", nil)), gochannel.ErrClosed)
	require.NoError(t, tr.Publisher().Publish("t", message.NewMessage("2", nil)))
	require.Equal(t, "2", receive(t, ch).UUID)

	require.NoError(t, tr.Close())
	closedCh(t, ch)
	require.ErrorIs(t, tr.Publisher().Publish("t", message.NewMessage("3", nil)), gochannel.ErrClosed)
	require.ErrorIs(t, tr.PublishMandatory("t", message.NewMessage("3", nil)), gochannel.ErrClosed)
	_, err = sub.Subscribe(context.Background(), "t")
	require.ErrorIs(t, err, gochannel.ErrClosed)
	require.ErrorIs(t, sub.(message.SubscribeInitializer).SubscribeInitialize("t"), gochannel.ErrClosed)
	require.NoError(t, tr.Close(), "twice")
}

// TestAckedJustBeforeTheEndIsNotRedelivered: a message acked right before
// its subscription ends is done, even if the subscription ends before the
// transport has seen the ack.
func TestAckedJustBeforeTheEndIsNotRedelivered(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other, _ := tr.Subscriber("a", 1)
	chOther, err := other.Subscribe(ctx, "t")
	require.NoError(t, err)
	for i := range 100 {
		sub, _ := tr.Subscriber("a", 1)
		ch, err := sub.Subscribe(ctx, "t")
		require.NoError(t, err)
		publish(t, tr, "t", fmt.Sprint(i))
		var msg *message.Message
		select {
		case msg = <-ch:
		case msg = <-chOther:
			// the other subscription took it: ack it there, and try again
		case <-time.After(time.Second):
			t.Fatal("no message")
		}
		msg.Ack()
		require.NoError(t, sub.Close())
	}
	nothing(t, chOther)
}

// groupA returns a new transport, a subscriber of group "a" and a context
// for its subscriptions; the test's end cancels the context and closes the
// transport.
func groupA(t *testing.T) (*gochannel.Transport, message.Subscriber, context.Context) {
	t.Helper()
	tr := gochannel.New(gochannel.Config{})
	t.Cleanup(func() { _ = tr.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, err := tr.Subscriber("a", 1)
	require.NoError(t, err)
	return tr, sub, ctx
}

package gochannel_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport/gochannel"
)

// TestHeldMessageStaysWhenSubscriptionsEndTogether: a router stops all its
// subscriptions at once (one parent context). The message one of them
// holds stays with its handler: acked after the stop, it is not delivered
// again. A dispatcher that gives back a message whose watcher has not yet
// seen its end fails most rounds with four subscriptions and about one in
// fourteen with one, where the end races the hand-out.
func TestHeldMessageStaysWhenSubscriptionsEndTogether(t *testing.T) {
	t.Parallel()
	for _, n := range []int{4, 1} {
		heldAtStop(t, n)
	}
}

func heldAtStop(t *testing.T, nsubs int) {
	dups := 0
	const rounds = 100
	for i := 0; i < rounds; i++ {
		tr := gochannel.New(gochannel.Config{})
		sub, _ := tr.Subscriber("a", 1)
		parent, cancel := context.WithCancel(context.Background())
		var chans []<-chan *message.Message
		for range nsubs {
			ch, err := sub.Subscribe(parent, "t")
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		_ = tr.Publisher().Publish("t", message.NewMessage("1", nil))
		var held *message.Message
		got := make(chan *message.Message, 4)
		for _, ch := range chans {
			go func() {
				for m := range ch {
					got <- m
				}
			}()
		}
		select {
		case held = <-got:
		case <-time.After(time.Second):
			t.Fatal("nothing received")
		}
		cancel()
		time.Sleep(5 * time.Millisecond)
		held.Ack()
		other, _ := tr.Subscriber("a", 1)
		ch, _ := other.Subscribe(context.Background(), "t")
		select {
		case m := <-ch:
			dups++
			m.Ack()
		case <-time.After(20 * time.Millisecond):
		}
		tr.Close()
	}
	if dups > 0 {
		t.Fatalf("%d subscriptions, %d of %d rounds: the message held at the stop and acked after it was delivered again", nsubs, dups, rounds)
	}
}

// TestCloseGivesBackWhatAnEndedSubscriptionHolds: the subscriber's Close
// gives back what an ended subscription still holds, also when the same
// subscriber subscribed again in between (a subscribe that forgets the
// ended one fails this).
func TestCloseGivesBackWhatAnEndedSubscriptionHolds(t *testing.T) {
	t.Parallel()
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	sub, _ := tr.Subscriber("a", 1)
	ctx1, cancel1 := context.WithCancel(context.Background())
	ch1, _ := sub.Subscribe(ctx1, "t")
	_ = tr.Publisher().Publish("t", message.NewMessage("1", nil))
	held := <-ch1
	cancel1()
	for range ch1 {
	}
	time.Sleep(20 * time.Millisecond)
	_, _ = sub.Subscribe(context.Background(), "other") // forgets the ended subscription
	_ = sub.Close()
	other, _ := tr.Subscriber("a", 1)
	ch, _ := other.Subscribe(context.Background(), "t")
	select {
	case m := <-ch:
		m.Ack()
	case <-time.After(time.Second):
		t.Fatal("Close did not give back the message an ended subscription held")
	}
	_ = held
}

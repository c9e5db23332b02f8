package gochannel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport/gochannel"
)

// BenchmarkDeliver: publish b.N messages to one group and ack them on n
// competing subscriptions.
func BenchmarkDeliver(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("subscriptions=%d", n), func(b *testing.B) {
			tr := gochannel.New(gochannel.Config{})
			defer tr.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sub, _ := tr.Subscriber("a", 1)
			var done sync.WaitGroup
			done.Add(b.N)
			for range n {
				ch, err := sub.Subscribe(ctx, "t")
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for msg := range ch {
						msg.Ack()
						done.Done()
					}
				}()
			}
			pub := tr.Publisher()
			msg := message.NewMessage("x", nil)
			b.ResetTimer()
			for range b.N {
				if err := pub.Publish("t", msg); err != nil {
					b.Fatal(err)
				}
			}
			done.Wait()
		})
	}
}

// BenchmarkDeliverHeld: as a batched handler takes them (WithBatch(100) at
// concurrency 8), 800 subscriptions of one group hold their messages until
// 100 have been taken, which are then acked together: most subscriptions
// are busy at any time.
func BenchmarkDeliverHeld(b *testing.B) {
	const subscriptions, batch = 800, 100
	tr := gochannel.New(gochannel.Config{})
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, _ := tr.Subscriber("a", 1)
	taken := make(chan *message.Message, subscriptions)
	for range subscriptions {
		ch, err := sub.Subscribe(ctx, "t")
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for msg := range ch {
				taken <- msg
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		held := make([]*message.Message, 0, batch)
		for i := 0; i < b.N; i++ {
			if held = append(held, <-taken); len(held) == batch || i == b.N-1 {
				for _, msg := range held {
					msg.Ack()
				}
				held = held[:0]
			}
		}
		close(done)
	}()
	pub := tr.Publisher()
	msg := message.NewMessage("x", nil)
	b.ResetTimer()
	for range b.N {
		if err := pub.Publish("t", msg); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

package amqp

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/logsink"
)

// TestNoDeliveryHandedOnAfterTheContextEnds: a delivery waiting in
// watermill-amqp's channel when the subscription's context ends is nacked
// back to the queue, never handed to the router (whose handler could then
// run after the bus closed; its ack would be lost with the channel). When
// both were ready, forward picked the delivery about one time in four.
func TestNoDeliveryHandedOnAfterTheContextEnds(t *testing.T) {
	s := &subscriber{group: "g", log: logsink.New(slog.New(slog.DiscardHandler)), closing: make(chan struct{})}
	for range 500 {
		ctx, cancel := context.WithCancel(context.Background())
		in, out := make(chan *message.Message, 1), make(chan *message.Message)
		msg := message.NewMessage("x", nil)
		msgCtx, msgCancel := context.WithCancel(ctx) // as watermill-amqp derives it
		msg.SetContext(msgCtx)
		in <- msg
		cancel()
		ended := make(chan struct{})
		go func() { s.forward(ctx, "t", in, out); close(ended) }()
		for range out {
			t.Fatal("a delivery was handed to the router after the context ended")
		}
		close(in)
		<-ended
		select {
		case <-msg.Nacked():
		default:
			t.Fatal("the delivery was neither handed on nor nacked")
		}
		msgCancel()
	}
}

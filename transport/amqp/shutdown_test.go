package amqp_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestNackAtTheLimitWhileStoppingIsLogged: a handler that nacks its message
// at the quorum queue's delivery limit after the subscription's context
// ended (a bus stopping) still gets the error line that says RabbitMQ drops
// it. If forward stops watching the message when the context ends, the
// drop leaves no trace.
func TestNackAtTheLimitWhileStoppingIsLogged(t *testing.T) {
	topic := testenv.Name("stopping_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	logs := &recorder{}
	tr := newTransport(t, amqp.Config{QueueType: amqp.QueueQuorum, DeliveryLimit: 2, Logger: slog.New(logs)})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	last, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			if msg.Metadata.Get(metadata.DeliveryCount) != "2" {
				msg.Nack()
				continue
			}
			close(last)
			go func() {
				<-ctx.Done()                      // the router closes ...
				time.Sleep(50 * time.Millisecond) // ... and the handler fails after it
				msg.Nack()
			}()
		}
	}()
	select {
	case <-last:
	case <-time.After(10 * time.Second):
		t.Fatal("no third delivery")
	}
	cancel()
	<-done
	require.Eventually(t, func() bool {
		return len(logs.find(slog.LevelError, "amqp: message nacked at its queue's delivery limit; RabbitMQ drops it")) == 1
	}, 5*time.Second, 20*time.Millisecond, "the drop at the limit was not logged")
	require.NoError(t, sub.Close())
}

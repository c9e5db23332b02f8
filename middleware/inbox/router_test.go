package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
)

// TestOnAPlainWatermillRouter: the inbox is an ordinary Watermill
// middleware, without the bus; the consumer defaults to the router's
// handler name.
func TestOnAPlainWatermillRouter(t *testing.T) {
	db := testenv.SQLite(t)
	effects(t, db)
	counters := &metrics.Counters{}
	mw, err := inbox.New(inbox.Config{DB: db, Recorder: counters})
	require.NoError(t, err)

	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("invoices", "orders", pubsub, func(msg *message.Message) error {
		_, err := writeEffect(msg)
		return err
	}).AddMiddleware(mw)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()
	for range 3 {
		require.NoError(t, pubsub.Publish("orders", message.NewMessage("order-1", nil)))
	}
	require.Eventually(t, func() bool { return counters.Get("invoices", metrics.Duplicate) == 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, pubsub.Close())
	require.EqualValues(t, 1, countEffects(t, db, "order-1"))
	var consumer string
	require.NoError(t, db.Raw("SELECT consumer FROM postroom_inbox").Scan(&consumer).Error)
	require.Equal(t, "invoices", consumer, "the consumer is the router's handler name")
}

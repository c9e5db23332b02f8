package bus_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// unnamed has no MessageName: its name is its import path and type name,
// which has '/' and is longer than a topic may be.
type unnamed struct{ N int }

// TestTopicsAProducerCanCompute: a producer that is not postroom publishes
// straight to bus.EventTopic and bus.CommandTopic, and the handler gets
// both; a destination that is no endpoint name is refused at Send.
func TestTopicsAProducerCanCompute(t *testing.T) {
	tr := gochannel.New(gochannel.Config{})
	b, err := bus.New(bus.Config{Endpoint: "names", Transport: tr, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	var got atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *unnamed) error { got.Add(1); return nil }))
	require.NotEqual(t, bus.MessageName[unnamed](), bus.EventTopic(bus.MessageName[unnamed]()), "the name is made into a topic")
	run(t, b)
	for _, topic := range []string{bus.EventTopic(bus.MessageName[unnamed]()), bus.CommandTopic("names", bus.MessageName[unnamed]())} {
		require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(testenv.Name("foreign-"), []byte(`{"N":1}`))))
	}
	waitFor(t, "both foreign messages handled", func() bool { return got.Load() == 2 })

	for _, dest := range []string{"bad/name", ""} {
		err := bus.Send(context.Background(), b, &unnamed{}, bus.To(dest))
		require.ErrorContains(t, err, "not an endpoint name", "To(%q)", dest)
	}
}

// TestHandlerNamesThatCannotNameAConsumer: a handler's name names its
// consumer in the inbox and the watermarks; one that is not valid UTF-8 or
// holds a NUL is refused at Handle; accepted, it makes every message fail
// on PostgreSQL with the database's error.
func TestHandlerNamesThatCannotNameAConsumer(t *testing.T) {
	b, err := bus.New(bus.Config{Endpoint: "names", DB: testenv.SQLite(t)})
	require.NoError(t, err)
	for _, name := range []string{"ledger\x00", "M\xfcller"} {
		err := bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.Named(name), bus.WithInbox())
		require.ErrorContains(t, err, "use valid UTF-8 without NUL", "name %q", name)
	}
	err = bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.Named(""), bus.WithInbox())
	require.ErrorContains(t, err, "handler name is empty")
	require.NoError(t, bus.Handle(b, func(context.Context, *OrderPlaced) error { return nil }, bus.Named("ledger.Müller"), bus.WithInbox()))
}

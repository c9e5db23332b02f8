package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/wire"
	"github.com/postroom/postroom/metadata"
)

// TestOptionsAreNotMetadata: a Send's options reach the receiver as what
// they mean, never as metadata strings: metadata that looks like an
// option (the keys the first versions used for To, DeliverAt and
// DeliverAfter) does nothing, the keys postroom reads as instructions are
// refused by WithMetadata, and Publish refuses To, so no destination key
// travels on the wire.
func TestOptionsAreNotMetadata(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("billing"), DB: testenv.SQLite(t), Logger: testenv.Logger(t)})
	require.NoError(t, err)
	got := make(chan map[string]string, 10)
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *CreateInvoice) error {
		got <- bus.Metadata(ctx)
		return nil
	}))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *OrderPlaced) error {
		got <- bus.Metadata(ctx)
		return nil
	}))
	ctx := testbus.Run(t, b)
	receive := func() map[string]string {
		t.Helper()
		select {
		case md := <-got:
			return md
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the message did not arrive")
			return nil
		}
	}

	hour := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	require.NoError(t, bus.Send(ctx, b, &CreateInvoice{},
		bus.WithMetadata("postroom-deliver-at", hour), bus.WithMetadata("postroom-deliver-after", "1h"),
		bus.WithMetadata("postroom-destination", "nobody")))
	md := receive() // at once, to this endpoint
	require.Equal(t, hour, md["postroom-deliver-at"], "plain metadata, carried as it is")

	require.NoError(t, bus.Send(ctx, b, &CreateInvoice{}))
	md = receive()
	for k := range md {
		require.NotContains(t, []string{"postroom-destination", "postroom-deliver-at", "postroom-deliver-after"}, k, "an option's key travelled")
	}

	require.ErrorContains(t, bus.Publish(ctx, b, &OrderPlaced{}, bus.To("shipping")), `To("shipping") is for Send`)
	require.NoError(t, bus.Publish(ctx, b, &OrderPlaced{}))
	md = receive()
	require.NotContains(t, md, wire.CommandTo)

	for _, key := range []string{metadata.MessageID, metadata.MessageType, wire.CommandTo, metadata.DeliveryCount,
		metadata.Redelivered, metadata.TransportError, metadata.ErrorGroup} {
		require.ErrorContains(t, bus.Send(ctx, b, &CreateInvoice{}, bus.WithMetadata(key, "x")), "WithMetadata(\""+key+"\"): the key is postroom's own", key)
		require.ErrorContains(t, bus.Publish(ctx, b, &OrderPlaced{}, bus.WithMetadata(key, "x")), "the key is postroom's own", key)
	}
	require.ErrorContains(t, bus.Send(ctx, b, &CreateInvoice{}, bus.To("")), `endpoint "": not an endpoint name`)
	require.ErrorIs(t, bus.Send(ctx, b, &CreateInvoice{}, bus.WithMessageID("")), bus.ErrBadMessageID, "an empty ID is refused, not replaced by a new one")
	select {
	case md := <-got:
		require.FailNow(t, "a refused send was delivered", "%v", md)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestADelayedSendRunsUnderTheCallersContext: a delayed Send outside a
// handler writes its row under the caller's context, so a cancelled or
// expired one fails it and writes no row.
func TestADelayedSendRunsUnderTheCallersContext(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: testenv.Name("billing"), DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }))
	testbus.Run(t, b)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, bus.Send(cancelled, b, &CreateInvoice{}, bus.DeliverAfter(time.Hour)), context.Canceled)
	var rows int64
	require.NoError(t, db.Table("postroom_delayed").Count(&rows).Error)
	require.Zero(t, rows, "a send that failed left a delayed row")

	require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{}, bus.DeliverAfter(time.Hour)))
	require.NoError(t, db.Table("postroom_delayed").Count(&rows).Error)
	require.EqualValues(t, 1, rows)
}

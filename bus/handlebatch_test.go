package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestHandleBatchIsValidated: what a batch handler cannot keep is refused
// at registration, with the reason.
func TestHandleBatchIsValidated(t *testing.T) {
	db := testenv.SQLite(t)
	for _, tc := range []struct {
		name  string
		noDB  bool
		opts  []bus.HandlerOption
		wants string
	}{
		{"no database", true, nil, "HandleBatch runs its batches in a transaction: set Config.DB"},
		{"stale", false, []bus.HandlerOption{bus.WithInbox(), bus.WithStale()}, "HandleBatch and WithStale do not combine"},
		{"message log", false, []bus.HandlerOption{bus.WithInbox(bus.Inbox{StorePayload: true})}, "HandleBatch and Inbox.MessageLog do not combine"},
		{"external effects", false, []bus.HandlerOption{bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{}})}, "do not combine"},
		{"size over the bound", false, []bus.HandlerOption{bus.WithBatch(1001, 0)}, "size 1001: must be 1 to 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := bus.Config{Endpoint: "batches", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t)}
			if tc.noDB {
				cfg.DB = nil
			}
			b, err := bus.New(cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			err = bus.HandleBatch(b, func(context.Context, []*ConfCmd) error { return nil }, tc.opts...)
			require.ErrorContains(t, err, tc.wants)
			// The name is free again: a corrected registration succeeds.
			if !tc.noDB {
				require.NoError(t, bus.HandleBatch(b, func(context.Context, []*ConfCmd) error { return nil }, bus.WithInbox(), bus.WithBatch(10, time.Millisecond)))
			}
		})
	}
}

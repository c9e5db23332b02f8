package bus

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/gochannel"
)

type chargeOnStop struct{}

func (chargeOnStop) MessageName() string { return "test.ChargeOnStop" }

// TestAnAttemptParkedByTheStopIsSaidAtWarn: a handler with external
// effects (Park) whose call the stop cuts off leaves its key parked and its
// message goes back to the broker; that is said at warn, with what to do,
// since nothing reaches the error topic until the next delivery (a cold
// trial read it at info only, among the routine lines of a stop).
func TestAnAttemptParkedByTheStopIsSaidAtWarn(t *testing.T) {
	db := testenv.SQLite(t)
	logger, logs := testenv.CapturedLogger(slog.LevelWarn)
	b, err := New(Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: logger,
		StopTimeout: 100 * time.Millisecond, Cleanup: CleanupSchedule{Disabled: true}})
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	require.NoError(t, Handle(b, func(ctx context.Context, _ *chargeOnStop) error {
		started <- struct{}{}
		<-ctx.Done() // the call, aborted by the stop
		return ctx.Err()
	}, WithInbox(Inbox{ExternalEffects: &ExternalEffects{}})))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- b.Run(ctx) }()
	<-b.Running()
	require.NoError(t, Send(context.Background(), b, &chargeOnStop{}, WithMessageID("charge-1")))
	<-started
	cancel()
	require.NoError(t, <-stopped)
	require.NoError(t, b.Close())

	list, err := claims.ListUnresolved(context.Background(), db, store.Tables{}.WithDefaults().Inbox, time.Now(), 10)
	require.NoError(t, err)
	require.Len(t, list, 1, "the key is parked")
	out := logs.String()
	require.Contains(t, out, "level=WARN")
	require.Contains(t, out, "message_id=charge-1")
	require.Contains(t, out, "postroom inbox resolve")
}

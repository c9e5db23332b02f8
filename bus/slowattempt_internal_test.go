package bus

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

type slowCommand struct{}

func (slowCommand) MessageName() string { return "test.Slow" }

// TestASlowAttemptIsSaid: an attempt still running after slowAttempt is
// said once at warn, with the handler and the message; one that ends
// sooner is not.
func TestASlowAttemptIsSaid(t *testing.T) {
	was := slowAttempt
	slowAttempt = time.Second // a quick attempt under -race on a busy machine stays far below it
	t.Cleanup(func() { slowAttempt = was })
	logger, logs := testenv.CapturedLogger(slog.LevelWarn)
	b, err := New(Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), Logger: logger})
	require.NoError(t, err)
	release := make(chan struct{})
	done := make(chan struct{}, 2)
	require.NoError(t, Handle(b, func(ctx context.Context, _ *slowCommand) error {
		defer func() { done <- struct{}{} }()
		if MessageID(ctx) == "slow" {
			<-release
		}
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- b.Run(ctx) }()
	<-b.Running()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-stopped)
	})
	require.NoError(t, Send(context.Background(), b, &slowCommand{}, WithMessageID("quick")))
	<-done
	require.NoError(t, Send(context.Background(), b, &slowCommand{}, WithMessageID("slow")))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "message_id=slow") }, 5*time.Second, 10*time.Millisecond)
	close(release)
	<-done
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="bus: an attempt is still running after 1s" handler=test.Slow message_id=slow attempt=1`)
	require.Contains(t, out, "unitofwork.Tx(ctx)", "the hint")
	require.NotContains(t, out, "message_id=quick")
	require.Equal(t, 1, strings.Count(out, "still running"), "said once")
}

package logsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLogAtALevel: Log writes at the level it is given, with the fields
// of With; a warning comes at info with stopping=true once the sink's
// owner stops, or when it comes of a cancelled context, as Error's does.
func TestLogAtALevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l, ok := s.Watermill().With(watermill.LogFields{"relay": "r1"}).(LevelLogger)
	require.True(t, ok, "the sink's adapter logs at a level")
	lines := func() []string {
		defer buf.Reset()
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}

	l.Log(slog.LevelWarn, "failing", errors.New("broker down"), watermill.LogFields{"topic": "orders"})
	require.Equal(t, []string{`level=WARN msg=failing relay=r1 topic=orders error="broker down"`}, trimTime(lines()))
	l.Log(slog.LevelInfo, "recovered", nil, nil)
	require.Equal(t, []string{`level=INFO msg=recovered relay=r1`}, trimTime(lines()))
	l.Log(slog.LevelWarn, "failing", context.Canceled, nil)
	require.Equal(t, []string{`level=INFO msg=failing relay=r1 stopping=true error="context canceled"`}, trimTime(lines()))
	l.Log(slog.LevelWarn, "failing", errors.New("conn closed"), nil)
	require.Equal(t, []string{`level=WARN msg=failing relay=r1 error="conn closed"`}, trimTime(lines()), "a closed connection is a stop's only during a stop")
	s.Stopping()
	l.Log(slog.LevelWarn, "failing", fmt.Errorf("read: %w", net.ErrClosed), nil)
	require.Equal(t, []string{`level=INFO msg=failing relay=r1 stopping=true error="read: use of closed network connection"`}, trimTime(lines()))
	l.Log(slog.LevelWarn, "failing", errors.New("could not rollback"), watermill.LogFields{"query_err": errors.New("conn closed")})
	require.Equal(t, []string{`level=INFO msg=failing query_err="conn closed" relay=r1 stopping=true error="could not rollback"`}, trimTime(lines()))
	// An error a stop does not cause keeps its level during a stop: a
	// commit failing in the drain is for an operator.
	l.Log(slog.LevelWarn, "failing", errors.New("broker down"), nil)
	require.Equal(t, []string{`level=WARN msg=failing relay=r1 error="broker down"`}, trimTime(lines()))
	s.Watermill().Error("commit", errors.New("deadlock detected"), nil)
	require.Contains(t, lines()[0], `level=ERROR msg=commit error="deadlock detected"`)
}

func trimTime(lines []string) []string {
	for i, l := range lines {
		if _, rest, ok := strings.Cut(l, " "); ok && strings.HasPrefix(l, "time=") {
			lines[i] = rest
		}
	}
	return lines
}

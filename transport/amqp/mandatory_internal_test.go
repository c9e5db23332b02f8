package amqp

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
)

// TestPublishMandatoryReconnects: after the connection (or only the
// channel) is lost, the next PublishMandatory reconnects and still tells
// an unroutable message apart.
func TestPublishMandatoryReconnects(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	var mu syncWriter
	mu.w = &logs
	tr, err := New(Config{URL: testenv.RequireAMQP(t), Logger: slog.New(slog.NewTextHandler(&mu, nil))})
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	topic := testenv.Name("noroute_")
	defer deleteExchange(t, topic)

	publish := func() error {
		return tr.PublishMandatory(topic, message.NewMessage(watermill.NewUUID(), nil))
	}
	require.ErrorIs(t, publish(), transport.ErrNoRoute)

	require.NoError(t, tr.publisher.conn.Close()) // as if the broker dropped it
	require.ErrorIs(t, publish(), transport.ErrNoRoute)

	require.NoError(t, tr.publisher.ch.Close())
	require.ErrorIs(t, publish(), transport.ErrNoRoute)

	require.Equal(t, 2, tr.publisher.connects)
	require.Contains(t, mu.String(), "amqp: reconnected the publisher")
}

func deleteExchange(t *testing.T, topic string) {
	tr, err := New(Config{URL: testenv.RequireAMQP(t)})
	require.NoError(t, err)
	defer tr.Close()
	require.NoError(t, tr.publisher.open(context.Background()))
	_ = tr.publisher.ch.ExchangeDelete(ExchangeName(topic), false, false)
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

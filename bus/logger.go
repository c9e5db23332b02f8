package bus

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/postroom/postroom/internal/logsink"
)

// watermillLogger adapts the bus's logger for Watermill's router and the
// outbox relay: info lines at debug level, errors as errors, except one
// caused by a cancelled context (a stop cutting a poll short, as the
// relay's "Error querying for message … context canceled"), which comes
// at info with stopping=true. Once the bus begins to stop, every such
// error comes at info (logsink.Sink.Stopping).
func watermillLogger(l *slog.Logger) (*logsink.Sink, watermill.LoggerAdapter) {
	sink := logsink.New(l)
	return sink, sink.Watermill()
}

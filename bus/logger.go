package bus

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/postroom/postroom/internal/logsink"
)

// watermillLogger adapts the bus's logger for Watermill's router and the
// outbox relay: info lines at debug level, errors as errors, but one of a
// cancelled context, or any once the bus stops, at info with stopping=true
// (logsink.Sink.Stopping).
func watermillLogger(l *slog.Logger) (*logsink.Sink, watermill.LoggerAdapter) {
	sink := logsink.New(l)
	return sink, sink.Watermill()
}

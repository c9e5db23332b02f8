package bus

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// watermillLogger adapts the bus's logger for Watermill. Watermill logs
// several trace and debug lines per message; when the logger would drop
// them anyway they are dropped before Watermill's fields are converted.
func watermillLogger(l *slog.Logger) watermill.LoggerAdapter {
	adapter := watermill.NewSlogLoggerWithLevelMapping(l, nil)
	if l.Enabled(context.Background(), slog.LevelDebug) {
		return adapter
	}
	return quietBelowInfo{adapter}
}

type quietBelowInfo struct{ watermill.LoggerAdapter }

func (quietBelowInfo) Debug(string, watermill.LogFields) {}
func (quietBelowInfo) Trace(string, watermill.LogFields) {}
func (q quietBelowInfo) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietBelowInfo{q.LoggerAdapter.With(fields)}
}

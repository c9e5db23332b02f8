package bus

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// watermillLogger adapts the bus's logger for Watermill's router. The
// router's info lines (a handler added, started, closed: dozens at each
// start) are logged at debug level, its errors as errors; postroom logs
// what an operator acts on itself. When the logger would drop debug lines
// anyway, they are dropped before Watermill's fields are converted.
func watermillLogger(l *slog.Logger) watermill.LoggerAdapter {
	adapter := watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	if l.Enabled(context.Background(), slog.LevelDebug) {
		return adapter
	}
	return errorsOnly{adapter}
}

// errorsOnly passes Watermill's errors on and drops the rest.
type errorsOnly struct{ watermill.LoggerAdapter }

func (errorsOnly) Info(string, watermill.LogFields)  {}
func (errorsOnly) Debug(string, watermill.LogFields) {}
func (errorsOnly) Trace(string, watermill.LogFields) {}
func (q errorsOnly) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return errorsOnly{q.LoggerAdapter.With(fields)}
}

package amqp

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
)

// logSink holds the logger the transport and watermill-amqp write to. It
// can be swapped at any time (SetLogger): watermill-amqp keeps the adapter
// it was given in New, and the adapter reads the current logger on each call.
type logSink struct {
	target atomic.Pointer[logTarget]
}

type logTarget struct {
	slog *slog.Logger
	wm   watermill.LoggerAdapter
}

func newLogSink(l *slog.Logger) *logSink {
	s := &logSink{}
	s.set(l)
	return s
}

// set makes l the target; nil discards everything.
func (s *logSink) set(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	s.target.Store(&logTarget{slog: l, wm: watermill.NewSlogLogger(l)})
}

// logger is the current target, for the transport's own logs.
func (s *logSink) logger() *slog.Logger { return s.target.Load().slog }

// watermill returns an adapter for watermill-amqp that forwards to the
// current target.
func (s *logSink) watermill() watermill.LoggerAdapter { return forwardingLogger{sink: s} }

// forwardingLogger is a watermill.LoggerAdapter that forwards to the
// logSink's current target (watermill's slog adapter, whose Trace is
// watermill.LevelTrace), with the fields of With.
type forwardingLogger struct {
	sink   *logSink
	fields watermill.LogFields
}

func (f forwardingLogger) enabled(t *logTarget, level slog.Level) bool {
	return t.slog.Enabled(context.Background(), level)
}

func (f forwardingLogger) Error(msg string, err error, fields watermill.LogFields) {
	if t := f.sink.target.Load(); f.enabled(t, slog.LevelError) {
		t.wm.Error(msg, err, f.fields.Add(fields))
	}
}

func (f forwardingLogger) Info(msg string, fields watermill.LogFields) {
	if t := f.sink.target.Load(); f.enabled(t, slog.LevelInfo) {
		t.wm.Info(msg, f.fields.Add(fields))
	}
}

func (f forwardingLogger) Debug(msg string, fields watermill.LogFields) {
	if t := f.sink.target.Load(); f.enabled(t, slog.LevelDebug) {
		t.wm.Debug(msg, f.fields.Add(fields))
	}
}

func (f forwardingLogger) Trace(msg string, fields watermill.LogFields) {
	if t := f.sink.target.Load(); f.enabled(t, watermill.LevelTrace) {
		t.wm.Trace(msg, f.fields.Add(fields))
	}
}

func (f forwardingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return forwardingLogger{sink: f.sink, fields: f.fields.Add(fields)}
}

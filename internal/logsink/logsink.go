// Package logsink is a logger a transport can swap after it has handed
// it to Watermill: a transport gets the bus's logger (SetLogger) after
// New, when its publisher already holds an adapter.
package logsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
)

// Sink holds the logger a transport and its Watermill components write
// to; Set swaps it at any time, since the adapter reads it on each call.
type Sink struct {
	target   atomic.Pointer[logTarget]
	stopping atomic.Bool // the owner began to stop: errors come at info
}

// Stopping says that the sink's owner has begun to stop: from now on an
// error a stop causes (see stopCaused) comes at info with stopping=true,
// so a routine stop pages no one. Any other error keeps its level.
func (s *Sink) Stopping() { s.stopping.Store(true) }

type logTarget struct {
	slog *slog.Logger
	wm   watermill.LoggerAdapter
}

// New returns a sink writing to l (nil: discard).
func New(l *slog.Logger) *Sink {
	s := &Sink{}
	s.Set(l)
	return s
}

// Set makes l the target; nil discards everything.
func (s *Sink) Set(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	s.target.Store(&logTarget{slog: l, wm: watermill.NewSlogLogger(l)})
}

// Logger is the current target, for the transport's own logs.
func (s *Sink) Logger() *slog.Logger { return s.target.Load().slog }

// Watermill returns an adapter for Watermill that forwards to the current
// target.
func (s *Sink) Watermill() watermill.LoggerAdapter { return forwardingLogger{sink: s} }

// LevelLogger is a Watermill adapter that also logs at any slog level
// (Watermill has no warning, and the sink's Info goes to debug), for our
// components handed a Watermill adapter.
type LevelLogger interface {
	watermill.LoggerAdapter
	// Log logs msg at level, with err (nil: none) and fields.
	Log(level slog.Level, msg string, err error, fields watermill.LogFields)
}

// forwardingLogger forwards to the Sink's current target, with the fields
// of With.
type forwardingLogger struct {
	sink   *Sink
	fields watermill.LogFields
}

func (f forwardingLogger) enabled(t *logTarget, level slog.Level) bool {
	return t.slog.Enabled(context.Background(), level)
}

// Error forwards an error, at info when a stop caused it.
func (f forwardingLogger) Error(msg string, err error, fields watermill.LogFields) {
	t := f.sink.target.Load()
	if f.stopCaused(err, fields) {
		if f.enabled(t, slog.LevelInfo) {
			t.wm.Info(msg, f.fields.Add(fields).Add(watermill.LogFields{"err": err, "stopping": true}))
		}
		return
	}
	if f.enabled(t, slog.LevelError) {
		t.wm.Error(msg, err, f.fields.Add(fields))
	}
}

// Info forwards at debug: Watermill's info lines come by the dozen at each
// start, and postroom logs what an operator acts on itself.
func (f forwardingLogger) Info(msg string, fields watermill.LogFields) {
	if t := f.sink.target.Load(); f.enabled(t, slog.LevelDebug) {
		t.wm.Debug(msg, f.fields.Add(fields))
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

// Log logs at level; a line at warn or above comes at info with
// stopping=true when Error's would.
func (f forwardingLogger) Log(level slog.Level, msg string, err error, fields watermill.LogFields) {
	t := f.sink.target.Load()
	all := f.fields.Add(fields)
	if level >= slog.LevelWarn && f.stopCaused(err, fields) {
		level, all["stopping"] = slog.LevelInfo, true
	}
	if !f.enabled(t, level) {
		return
	}
	keys := slices.Sorted(maps.Keys(all))
	args := make([]any, 0, len(keys)+1)
	for _, k := range keys {
		args = append(args, slog.Any(k, all[k]))
	}
	if err != nil {
		args = append(args, slog.Any("error", err))
	}
	t.slog.Log(context.Background(), level, msg, args...)
}

func (f forwardingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return forwardingLogger{sink: f.sink, fields: f.fields.Add(fields)}
}

// stopCaused reports whether a stop caused an error: a cancelled context
// (only a stop cancels Watermill's), or, once Stopping, a connection
// closed under the call.
func (f forwardingLogger) stopCaused(err error, fields watermill.LogFields) bool {
	return cancelled(err, fields) || (f.sink.stopping.Load() && closedUnder(err, fields))
}

// cancelled reports whether err, or an error among fields (watermill-sql's
// query_err), comes from a cancelled context.
func cancelled(err error, fields watermill.LogFields) bool {
	return anyError(err, fields, func(e error) bool { return errors.Is(e, context.Canceled) })
}

// closedUnder reports whether an error says that a connection or pool was
// closed under the call (drivers do not all use a sentinel).
func closedUnder(err error, fields watermill.LogFields) bool {
	return anyError(err, fields, func(e error) bool {
		if errors.Is(e, net.ErrClosed) || errors.Is(e, sql.ErrConnDone) || errors.Is(e, sql.ErrTxDone) || errors.Is(e, driver.ErrBadConn) {
			return true
		}
		text := e.Error()
		for _, s := range closedTexts {
			if strings.Contains(text, s) {
				return true
			}
		}
		return false
	})
}

// closedTexts are the drivers' and transports' words for a connection
// closed under a call; a peer's reset is not among them (it is for an
// operator).
var closedTexts = []string{
	"conn closed",
	"sql: database is closed",
	"invalid connection",
	"use of closed network connection",
	"channel/connection is not open",
	"subscriber is closed",
	"transport is closed",
}

// anyError reports whether match holds for err or for an error among
// fields.
func anyError(err error, fields watermill.LogFields, match func(error) bool) bool {
	if err != nil && match(err) {
		return true
	}
	for _, v := range fields {
		if e, ok := v.(error); ok && e != nil && match(e) {
			return true
		}
	}
	return false
}

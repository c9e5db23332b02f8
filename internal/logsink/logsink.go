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

// Sink holds the logger a transport and its Watermill publisher and
// subscribers write to. It can be swapped at any time (Set): Watermill
// keeps the adapter it was given, and the adapter reads the current
// logger on each call.
type Sink struct {
	target   atomic.Pointer[logTarget]
	stopping atomic.Bool // the owner began to stop: errors come at info
}

// Stopping says that the sink's owner has begun to stop: from now on an
// error a stop causes comes at info, with stopping=true. A stop cuts polls,
// reads and acks short in ways whose errors do not all say "context
// canceled" (a connection closed under a query: "driver: bad connection",
// "conn closed"), and a routine stop should not page anyone. Any other
// error keeps its level: a commit that fails during the drain, a broker
// refusing a publish, is for an operator whether or not a stop has begun.
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

// LevelLogger is a Watermill adapter that also logs at any slog level:
// Watermill's levels have no warning, and the sink's Info is Watermill's
// chatter at debug. A component of ours handed a Watermill adapter (the
// outbox relay) logs its own lines through it.
type LevelLogger interface {
	watermill.LoggerAdapter
	// Log logs msg at level, with err (nil: none) and fields.
	Log(level slog.Level, msg string, err error, fields watermill.LogFields)
}

// forwardingLogger is a watermill.LoggerAdapter that forwards to the
// Sink's current target (watermill's slog adapter, whose Trace is
// watermill.LevelTrace), with the fields of With.
type forwardingLogger struct {
	sink   *Sink
	fields watermill.LogFields
}

func (f forwardingLogger) enabled(t *logTarget, level slog.Level) bool {
	return t.slog.Enabled(context.Background(), level)
}

// Error forwards an error, but one caused by a cancelled context at info:
// only a stop cancels the contexts Watermill's components run under (a
// poll, a read transaction cut short when the bus stops), and a routine
// stop should not page anyone.
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

// Info forwards at debug level: Watermill's info lines (a subscriber's
// schema initialised, with its DDL; a handler added, started, closed) come
// by the dozen at each start, and postroom logs what an operator acts on
// itself.
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

// stopCaused reports whether an error is one a stop causes: it comes of a
// cancelled context (a stop cancels the contexts Watermill's components
// run under), or the sink's owner is stopping and it says a connection
// was closed under it.
func (f forwardingLogger) stopCaused(err error, fields watermill.LogFields) bool {
	return cancelled(err, fields) || (f.sink.stopping.Load() && closedUnder(err, fields))
}

// cancelled reports whether a Watermill error comes from a cancelled
// context: err itself, or the error it followed (watermill-sql's "could
// not rollback tx for querying message", whose err is "conn closed" and
// whose query_err field the cancelled query's).
func cancelled(err error, fields watermill.LogFields) bool {
	return anyError(err, fields, func(e error) bool { return errors.Is(e, context.Canceled) })
}

// closedUnder reports whether an error says that a connection or a pool
// was closed under the call: what a stop does to a query, a read or an ack
// in flight. Drivers say it in their own words, not all with a sentinel.
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

// closedTexts are what the drivers postroom uses say when a connection is
// closed under a call: pgx, database/sql, go-sql-driver/mysql, amqp091,
// the SQL transport's and RabbitMQ transport's own. A connection the
// peer reset is not among them: a server or broker failing during the
// drain is for an operator.
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

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/internal/wire"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// relayPublisher is the relay's destination: it publishes to the transport
// and moves a message the transport keeps refusing to the error topic.
type relayPublisher struct {
	cfg      Config
	mu       sync.Mutex
	attempts map[string]int // failed attempts per topic and message ID

	// Failed publishes in a row, of any message (an outage retries every
	// PollInterval; it is logged once, then every outageReminder).
	failures     int
	failingSince time.Time
	remindedAt   time.Time

	elsewhereAt time.Time // when a message of another reach was last logged
	elsewhereN  int       // messages of another reach published
}

// reachKey is the metadata carrying an outbox message's Config.Reach;
// taken off before the message is published.
const reachKey = "postroom-outbox-reach"

// errElsewhere is the error logged for a message of another reach.
var errElsewhere = errors.New("outbox: the message was written for another transport's subscribers")

// errRefused marks an error for a message the relay will try again; the
// relay logged it already, so the router does not (relayLogger).
var errRefused = errors.New("outbox: the transport refused the message, the relay will retry")

// outageReminderDefault is how often the relay says it is still failing.
const outageReminderDefault = 30 * time.Second

// relayHandler names the relay in an error topic's metadata.
const relayHandler = "postroom.outbox-relay"

func (p *relayPublisher) Publish(topic string, msgs ...*message.Message) error {
	var errs []error
	for _, msg := range msgs {
		errs = append(errs, p.publish(topic, msg))
	}
	return errors.Join(errs...)
}

func (p *relayPublisher) publish(topic string, msg *message.Message) error {
	if reach := msg.Metadata.Get(reachKey); reach != "" && reach != p.cfg.Reach {
		p.elsewhere(topic, msg, reach)
	}
	delete(msg.Metadata, reachKey)
	var err error
	if p.cfg.PublishCommand != nil && msg.Metadata.Get(wire.CommandTo) != "" {
		err = p.cfg.PublishCommand(topic, msg)
	} else {
		err = p.cfg.Destination.Publish(topic, msg)
	}
	key := topic + "\x00" + msg.UUID
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.attempts, key)
		p.recovered()
		return nil
	}
	if errors.Is(err, context.Canceled) {
		// A stop cut the publish short: not counted; it stays in the outbox.
		p.failed(err, watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempt": p.attempts[key]})
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	if errors.Is(err, transport.ErrUnreachable) || dialect.Transient(err) {
		// An outage, not counted: else a heal between the last attempt and
		// the error topic's copy (or a flapping broker) would move it aside.
		p.failed(err, watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempt": p.attempts[key], "unreachable": true})
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	p.attempts[key]++
	n := p.attempts[key]
	if n < p.cfg.MaxRelayAttempts {
		p.failed(err, watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempt": n})
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	failed := msg.Copy()
	failed.Metadata.Set(metadata.ErrorReason, fmt.Sprintf("outbox relay: the transport refused the message %d times: %v", n, err))
	failed.Metadata.Set(metadata.ErrorHandler, relayHandler)
	failed.Metadata.Set(metadata.ErrorAttempts, strconv.Itoa(n))
	failed.Metadata.Set(metadata.ErrorTopic, topic)
	failed.Metadata.Set(metadata.ErrorAt, time.Now().UTC().Format(time.RFC3339Nano))
	if moveErr := p.cfg.Destination.Publish(p.cfg.ErrorTopic, failed); moveErr != nil {
		// The error topic refused too: an outage; keep trying.
		p.failed(err, watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempt": n, "error_topic_error": moveErr.Error()})
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	delete(p.attempts, key)
	p.failures = 0 // the relay moves on: the line below ends the story
	p.cfg.Logger.Error("outbox: message moved to the error topic after failed relays", err,
		watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempts": n, "error_topic": p.cfg.ErrorTopic})
	if p.cfg.OnMovedAside != nil {
		p.cfg.OnMovedAside(topic, msg, err)
	}
	return nil
}

func (p *relayPublisher) Close() error { return nil }

// elsewhere says, at error and at most every outageReminder, that the
// relay publishes a message written for another reach (see Config.Reach).
// The message is published all the same, not held for the relay of its
// reach: relays would hold each other back, and a reach that changes
// between deploys would hold messages back for good.
func (p *relayPublisher) elsewhere(topic string, msg *message.Message, reach string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.elsewhereN++
	if now := time.Now(); p.elsewhereAt.IsZero() || now.Sub(p.elsewhereAt) >= p.cfg.outageReminder {
		p.elsewhereAt = now
		p.cfg.Logger.Error("outbox: this relay published messages written by a service whose transport may not reach the same "+
			"subscribers: if that service's broker, vhost or transport differs, they went where nobody reads them; give services "+
			"on different brokers, vhosts or transports a database (or schema) each", errElsewhere,
			watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "message_reach": reach, "relay_reach": p.cfg.Reach,
				"published_since_start": p.elsewhereN})
	}
}

// failed logs a refused publish the relay will try again: at warn when
// the relay starts failing, then at most every outageReminder with how
// many attempts failed since. Called with p.mu held.
func (p *relayPublisher) failed(err error, fields watermill.LogFields) {
	now := time.Now()
	p.failures++
	switch {
	case p.failures == 1:
		p.failingSince, p.remindedAt = now, now
		msg := "outbox: relay failing: the transport refused a message; " +
			"the relay will keep retrying it every poll and nothing is lost (it stays in the outbox)"
		if errors.Is(err, context.Canceled) { // a stop (said at info by the logger, stopping=true)
			msg = "outbox: a publish was cut short by the relay's context (a stop); " +
				"the message stays in the outbox and is relayed again"
		}
		logAt(p.cfg.Logger, slog.LevelWarn, msg, err, fields)
	case now.Sub(p.remindedAt) >= p.cfg.outageReminder:
		p.remindedAt = now
		logAt(p.cfg.Logger, slog.LevelWarn, "outbox: relay still failing, will keep retrying; nothing is lost", err,
			fields.Add(watermill.LogFields{"failed_attempts": p.failures, "failing_for": roundDuration(now.Sub(p.failingSince))}))
	}
}

// recovered logs, once, that a publish succeeded after failures. Called
// with p.mu held.
func (p *relayPublisher) recovered() {
	if p.failures == 0 {
		return
	}
	d := roundDuration(time.Since(p.failingSince))
	logAt(p.cfg.Logger, slog.LevelInfo, fmt.Sprintf("outbox: relay recovered after %d failed attempts over %s", p.failures, d), nil,
		watermill.LogFields{"failed_attempts": p.failures, "failing_for": d})
	p.failures = 0
}

// roundDuration rounds d for a log line: 350ms, 2.4s, 3m4s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// logAt logs at level through a logger that can (logsink's), and
// otherwise at Watermill's nearest: error for a warning, info for info.
func logAt(l watermill.LoggerAdapter, level slog.Level, msg string, err error, fields watermill.LogFields) {
	if ll, ok := l.(logsink.LevelLogger); ok {
		ll.Log(level, msg, err, fields)
		return
	}
	if level >= slog.LevelWarn {
		l.Error(msg, err, fields)
		return
	}
	l.Info(msg, fields)
}

// relayLogger is the relay router's logger: its "Handler returned error"
// for errRefused comes at debug (the relay said it already; at the poll
// rate it would flood the log at error through an outage).
type relayLogger struct{ watermill.LoggerAdapter }

func (l relayLogger) Error(msg string, err error, fields watermill.LogFields) {
	if errors.Is(err, errRefused) {
		l.Debug(msg, fields.Add(watermill.LogFields{"error": err}))
		return
	}
	l.LoggerAdapter.Error(msg, err, fields)
}

func (l relayLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return relayLogger{l.LoggerAdapter.With(fields)}
}

package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
)

// relayPublisher is the relay's destination: it publishes to the
// transport, and moves a message the transport keeps refusing to the error
// topic, so that one poison message does not hold up every one behind it.
type relayPublisher struct {
	cfg      Config
	mu       sync.Mutex
	attempts map[string]int // failed attempts per topic and message ID
}

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
	var err error
	if p.cfg.PublishCommand != nil && msg.Metadata.Get(metadata.CommandTo) != "" {
		err = p.cfg.PublishCommand(topic, msg)
	} else {
		err = p.cfg.Destination.Publish(topic, msg)
	}
	key := topic + "\x00" + msg.UUID
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.attempts, key)
		return nil
	}
	p.attempts[key]++
	n := p.attempts[key]
	if n < p.cfg.MaxRelayAttempts {
		p.cfg.Logger.Error("outbox: relay failed, will retry", err, watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempt": n})
		return err
	}
	failed := msg.Copy()
	failed.Metadata.Set(metadata.ErrorReason, fmt.Sprintf("outbox relay: the transport refused the message %d times: %v", n, err))
	failed.Metadata.Set(metadata.ErrorHandler, relayHandler)
	failed.Metadata.Set(metadata.ErrorAttempts, strconv.Itoa(n))
	failed.Metadata.Set(metadata.ErrorTopic, topic)
	failed.Metadata.Set(metadata.ErrorAt, time.Now().UTC().Format(time.RFC3339Nano))
	if moveErr := p.cfg.Destination.Publish(p.cfg.ErrorTopic, failed); moveErr != nil {
		// The broker refuses the error topic too: an outage, not a poison
		// message. Keep trying; nothing is moved aside.
		p.cfg.Logger.Error("outbox: relay failed and the error topic refused the message too, will retry", err,
			watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "error_topic_error": moveErr.Error()})
		return err
	}
	delete(p.attempts, key)
	p.cfg.Logger.Error("outbox: message moved to the error topic after failed relays", err,
		watermill.LogFields{"topic": topic, "message_uuid": msg.UUID, "attempts": n, "error_topic": p.cfg.ErrorTopic})
	if p.cfg.OnMovedAside != nil {
		p.cfg.OnMovedAside(topic, msg, err)
	}
	return nil
}

func (p *relayPublisher) Close() error { return nil }

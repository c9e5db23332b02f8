package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/middleware/tracing"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/transport"
)

// SendOption sets something on an outgoing message.
type SendOption func(*message.Message)

// WithVersion marks the message as a versioned update of one entity, for
// handlers that use the stale-update check.
func WithVersion(entityID string, at time.Time) SendOption {
	return func(m *message.Message) {
		m.Metadata.Set(metadata.EntityID, entityID)
		m.Metadata.Set(metadata.Version, at.UTC().Format(time.RFC3339Nano))
	}
}

// WithMessageID sets the message ID instead of a new UUIDv7, for a sender
// that must send the same logical message again (a retried upload, a
// scheduled slot) and have it deduplicated.
func WithMessageID(id string) SendOption {
	return func(m *message.Message) {
		m.UUID = id
		m.Metadata.Set(metadata.MessageID, id)
	}
}

// WithMetadata sets one metadata entry.
func WithMetadata(key, value string) SendOption {
	return func(m *message.Message) { m.Metadata.Set(key, value) }
}

// To sends a command to another endpoint instead of this one.
func To(endpoint string) SendOption {
	return func(m *message.Message) { m.Metadata.Set(destinationKey, endpoint) }
}

const destinationKey = "postroom-destination"

// Send sends a command to the one endpoint that owns it: this endpoint, or
// the one named with To. Inside a handler it is dispatched after the
// handler's transaction commits, and not at all if it rolls back. Outside
// a handler it returns once the broker has the message, or with an error
// when ctx ends first (then the broker may have taken it or not: send it
// again with the same WithMessageID, and a handler with the inbox skips a
// copy).
func Send[T any](ctx context.Context, b *Bus, cmd *T, opts ...SendOption) error {
	if cmd == nil {
		return fmt.Errorf("bus: send %s: the command is a nil pointer", MessageName[T]())
	}
	msg, err := b.newMessage(ctx, MessageName[T](), cmd, opts)
	if err != nil {
		return err
	}
	dest, named := msg.Metadata[destinationKey]
	if !named {
		dest = b.cfg.Endpoint
	}
	delete(msg.Metadata, destinationKey)
	if !endpointName.MatchString(dest) {
		return fmt.Errorf("bus: send %s to endpoint %q: not an endpoint name (1 to 40 letters, digits, '-', '_' or '.')", MessageName[T](), dest)
	}
	msg.Metadata.Set(metadata.CommandTo, dest)
	out, err := b.outgoingOf(commandTopic(dest, MessageName[T]()), msg)
	if err != nil {
		return err
	}
	return b.dispatch(ctx, out)
}

// Publish publishes an event to every endpoint that handles it. Inside a
// handler it is dispatched after the handler's transaction commits.
func Publish[T any](ctx context.Context, b *Bus, event *T, opts ...SendOption) error {
	if event == nil {
		return fmt.Errorf("bus: publish %s: the event is a nil pointer", MessageName[T]())
	}
	msg, err := b.newMessage(ctx, MessageName[T](), event, opts)
	if err != nil {
		return err
	}
	out, err := b.outgoingOf(eventTopic(MessageName[T]()), msg)
	if err != nil {
		return err
	}
	return b.dispatch(ctx, out)
}

func (b *Bus) newMessage(ctx context.Context, name string, payload any, opts []SendOption) (*message.Message, error) {
	body, err := b.cfg.Marshaler.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("bus: marshal %s: %w", name, err)
	}
	if _, isJSON := b.cfg.Marshaler.(JSON); isJSON && bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		// A nil slice, map or pointer type, or a MarshalJSON returning
		// null: every handler would refuse it (JSON.Unmarshal).
		return nil, fmt.Errorf("bus: marshal %s: %w", name, errNullPayload)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("bus: message ID: %w", err)
	}
	msg := message.NewMessage(id.String(), body)
	msg.Metadata.Set(metadata.MessageID, msg.UUID)
	msg.Metadata.Set(metadata.MessageType, name)
	msg.Metadata.Set(metadata.SentAt, b.cfg.Now().UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set(metadata.SourceEndpoint, b.cfg.Endpoint)
	msg.Metadata.Set("content-type", b.cfg.Marshaler.ContentType())
	if in := incomingFrom(ctx); in != nil {
		msg.Metadata.Set(metadata.CorrelationID, in.correlationID())
		msg.Metadata.Set(metadata.CausationID, in.msg.UUID)
	} else {
		msg.Metadata.Set(metadata.CorrelationID, msg.UUID)
	}
	if b.cfg.TracerProvider != nil {
		tracing.Inject(ctx, msg, b.cfg.Propagator)
	}
	for _, o := range opts {
		o(msg)
	}
	if err := checkID(msg.UUID); err != nil {
		return nil, fmt.Errorf("bus: %s: %w", name, err)
	}
	if msg.Metadata.Get(metadata.Version) != "" {
		// WithVersion("", t) or a zero t was sent, and refused by every
		// receiver's stale check (found by a cold trial). Only with a
		// version: an entity ID alone may be metadata of a sender whose
		// receivers read the version from the payload.
		v, err := stale.MetadataVersion(msg)
		if err == nil {
			err = v.Check()
		}
		if err != nil {
			return nil, fmt.Errorf("bus: %s: WithVersion: %w", name, err)
		}
	}
	return msg, nil
}

// outgoingOf is the outgoing message for topic, with the delivery time its
// options asked for.
func (b *Bus) outgoingOf(topic string, msg *message.Message) (outgoing, error) {
	at, err := b.takeDeliveryTime(msg)
	if err != nil {
		return outgoing{}, fmt.Errorf("bus: %s: delivery time: %w", msg.Metadata.Get(metadata.MessageType), err)
	}
	return outgoing{topic: topic, msg: msg, at: at}, nil
}

// ErrBadMessageID is wrapped by Send and Publish for an ID no transport or
// inbox could carry.
var ErrBadMessageID = errors.New("bad message ID")

// checkID refuses an ID that some transport or store would not carry byte
// for byte: every ID the bus accepts travels on every transport, through
// the outbox, and fits the inbox.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrBadMessageID)
	case len(id) > inbox.MaxKeyLength:
		return fmt.Errorf("%w: %d bytes, longer than the %d every transport and the inbox carry", ErrBadMessageID, len(id), inbox.MaxKeyLength)
	case !dialect.ExactText(id):
		return fmt.Errorf("%w %q: not valid UTF-8, or contains a NUL byte", ErrBadMessageID, id)
	}
	return nil
}

// dispatch publishes out. In a handler it goes through the outbox in the
// handler's transaction when there is one, else it waits for the commit.
func (b *Bus) dispatch(ctx context.Context, out outgoing) error {
	if !out.at.IsZero() {
		if tx := inTransaction(ctx); tx != nil {
			return b.delay(ctx, tx, out) // commits with the handler
		}
	}
	if in := incomingFrom(ctx); in != nil {
		if b.outbox != nil && unitofwork.Active(ctx) {
			return b.outbox.Publish(ctx, unitofwork.Tx(ctx), out.topic, out.msg)
		}
		in.outgoing = append(in.outgoing, out)
		return nil
	}
	// The publish waits for the broker as long as the caller's context
	// lasts (before, a Send with a 10 s deadline waited up to 120 s during
	// an outage: found by a cold trial).
	out.msg.SetContext(ctx)
	return b.publish(out)
}

// publish publishes out now, through the transport's mandatory publish
// where it has one: a command sent to an endpoint with no queue fails
// instead of being dropped by the broker, and an event nobody subscribes
// to is logged at debug level and counted as unrouted (under the
// message's type), which is not an error.
func (b *Bus) publish(out outgoing) error {
	if !out.at.IsZero() {
		return b.delay(context.Background(), b.cfg.DB, out)
	}
	var err error
	to := out.msg.Metadata.Get(metadata.CommandTo) // set by Send
	if m, ok := b.cfg.Transport.(transport.Mandatory); ok {
		err = m.PublishMandatory(out.topic, out.msg)
	} else {
		err = b.cfg.Transport.Publisher().Publish(out.topic, out.msg)
	}
	name := out.msg.Metadata.Get(metadata.MessageType)
	switch {
	case errors.Is(err, transport.ErrNoRoute) && to == "":
		b.cfg.Logger.Debug("bus: no queue takes the event: nobody subscribes to it", "message_type", name, "topic", out.topic, "message_id", out.msg.UUID)
		b.cfg.Recorder.Record(name, metrics.Unrouted)
		return nil
	case errors.Is(err, transport.ErrNoRoute):
		return fmt.Errorf("bus: send %s to endpoint %q: no queue takes it (has the endpoint started? is its name right?): %w", name, to, err)
	case err != nil:
		return fmt.Errorf("bus: publish to %s: %w", out.topic, err)
	}
	return nil
}

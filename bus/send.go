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
	"github.com/postroom/postroom/internal/endpointname"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/internal/wire"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/middleware/tracing"
	"github.com/postroom/postroom/transport"
)

// SendOption sets something on an outgoing message; metadata never acts as
// an option (see WithMetadata).
type SendOption func(*sendOptions)

// sendOptions is what the options of one Send or Publish asked for.
type sendOptions struct {
	metadata map[string]string // WithMetadata and WithVersion
	id       string            // WithMessageID
	idSet    bool              // WithMessageID was given: its "" is refused, not replaced
	to       string            // To
	toSet    bool              // To was given: To("") is refused, not this endpoint
	at       time.Time         // DeliverAt
	after    time.Duration     // DeliverAfter
	afterSet bool
	refused  error // the first option refused
}

func (o *sendOptions) set(key, value string) {
	if o.metadata == nil {
		o.metadata = map[string]string{}
	}
	o.metadata[key] = value
}

// WithVersion marks the message as a versioned update of one entity, for
// handlers that use the stale-update check.
func WithVersion(entityID string, at time.Time) SendOption {
	return func(o *sendOptions) {
		o.set(metadata.EntityID, entityID)
		o.set(metadata.Version, at.UTC().Format(time.RFC3339Nano))
	}
}

// WithMessageID sets the message ID instead of a new UUIDv7, for a sender
// that sends the same logical message again and wants it deduplicated.
func WithMessageID(id string) SendOption {
	return func(o *sendOptions) { o.id, o.idSet = id, true }
}

// WithMetadata sets one metadata entry. Keys postroom sets itself or reads
// as instructions (the message ID and type, a command's endpoint, a
// delivery count, the error topic's entries) are refused: Send and Publish
// fail, naming the typed option to use where there is one.
func WithMetadata(key, value string) SendOption {
	return func(o *sendOptions) {
		if instead, reserved := reservedMetadata[key]; reserved {
			if o.refused == nil {
				o.refused = fmt.Errorf("WithMetadata(%q): the key is postroom's own%s", key, instead)
			}
			return
		}
		o.set(key, value)
	}
}

// reservedMetadata are the keys WithMetadata refuses, with what to use instead.
var reservedMetadata = map[string]string{
	metadata.MessageID:            ": use WithMessageID",
	metadata.MessageType:          ": the message's Go type names it",
	wire.CommandTo:                ": use To",
	metadata.TransportError:       "",
	metadata.UnreadMetadata:       "",
	metadata.DeliveryCount:        "",
	metadata.Redelivered:          "",
	metadata.DelayedRetries:       "",
	metadata.Replayed:             "",
	metadata.ErrorReason:          "",
	metadata.ErrorHandler:         "",
	metadata.ErrorAttempts:        "",
	metadata.ErrorTopic:           "",
	metadata.ErrorAt:              "",
	metadata.ErrorDroppedMetadata: "",
	metadata.ErrorGroup:           "",
}

// To sends a command to another endpoint instead of this one. Publish
// refuses it: an event goes to every endpoint that subscribes to it.
func To(endpoint string) SendOption {
	return func(o *sendOptions) { o.to, o.toSet = endpoint, true }
}

// Send sends a command to the one endpoint that owns it: this endpoint, or
// the one named with To. Inside a handler it is dispatched after the
// handler's transaction commits, and not at all if it rolls back (with
// Config.Outbox it is written in that transaction). Outside one it returns
// once the broker has the message, or when ctx ends (taken or not: resend
// with WithMessageID).
func Send[T any](ctx context.Context, b *Bus, cmd *T, opts ...SendOption) error {
	if cmd == nil {
		return fmt.Errorf("bus: send %s: the command is a nil pointer", MessageName[T]())
	}
	msg, o, err := b.newMessage(ctx, MessageName[T](), cmd, opts)
	if err != nil {
		return err
	}
	dest := o.to
	if !o.toSet {
		dest = b.cfg.Endpoint
	}
	if !endpointname.Valid(dest) {
		return fmt.Errorf("bus: send %s to endpoint %q: not an endpoint name (1 to 40 letters, digits, '-', '_' or '.')", MessageName[T](), dest)
	}
	msg.Metadata.Set(wire.CommandTo, dest)
	return b.dispatch(ctx, b.outgoingOf(commandTopic(dest, MessageName[T]()), msg, o))
}

// Publish publishes an event to every endpoint that handles it. Inside a
// handler it is dispatched after the handler's transaction commits.
func Publish[T any](ctx context.Context, b *Bus, event *T, opts ...SendOption) error {
	if event == nil {
		return fmt.Errorf("bus: publish %s: the event is a nil pointer", MessageName[T]())
	}
	msg, o, err := b.newMessage(ctx, MessageName[T](), event, opts)
	if err != nil {
		return err
	}
	if o.toSet {
		return fmt.Errorf("bus: publish %s: To(%q) is for Send: an event goes to every endpoint that subscribes to it", MessageName[T](), o.to)
	}
	return b.dispatch(ctx, b.outgoingOf(eventTopic(MessageName[T]()), msg, o))
}

// newMessage is the message for payload, and what opts asked for.
func (b *Bus) newMessage(ctx context.Context, name string, payload any, opts []SendOption) (*message.Message, sendOptions, error) {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.refused != nil {
		return nil, o, fmt.Errorf("bus: %s: %w", name, o.refused)
	}
	body, err := b.cfg.Marshaler.Marshal(payload)
	if err != nil {
		return nil, o, fmt.Errorf("bus: marshal %s: %w", name, err)
	}
	if _, isJSON := b.cfg.Marshaler.(JSON); isJSON && bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		// Every handler would refuse a null payload (JSON.Unmarshal).
		return nil, o, fmt.Errorf("bus: marshal %s: %w", name, errNullPayload)
	}
	id := o.id
	if !o.idSet {
		v7, err := uuid.NewV7()
		if err != nil {
			return nil, o, fmt.Errorf("bus: message ID: %w", err)
		}
		id = v7.String()
	}
	msg := message.NewMessage(id, body)
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
	if b.cfg.Tracing.Provider != nil {
		tracing.Inject(ctx, msg, b.cfg.Tracing.Propagator)
	}
	for k, v := range o.metadata {
		msg.Metadata.Set(k, v)
	}
	if err := checkID(msg.UUID); err != nil {
		return nil, o, fmt.Errorf("bus: %s: %w", name, err)
	}
	if msg.Metadata.Get(metadata.Version) != "" {
		// Refused here as every stale check would refuse it; an entity ID
		// alone may go with a version in the payload.
		v, err := stale.MetadataVersion(msg)
		if err == nil {
			err = v.Check()
		}
		if err != nil {
			return nil, o, fmt.Errorf("bus: %s: WithVersion: %w", name, err)
		}
	}
	return msg, o, nil
}

// outgoingOf is the outgoing message for topic, at o's delivery time.
func (b *Bus) outgoingOf(topic string, msg *message.Message, o sendOptions) outgoing {
	at := o.at
	if o.afterSet {
		at = b.cfg.Now().Add(o.after)
	}
	return outgoing{topic: topic, msg: msg, at: at}
}

// ErrBadMessageID is wrapped by Send and Publish for an ID no transport or
// inbox could carry (empty, too long, not UTF-8, or with NUL).
var ErrBadMessageID = errors.New("bad message ID")

// checkID refuses an ID that some transport, the outbox or the inbox would
// not carry byte for byte.
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

// dispatch publishes out; in a handler through the outbox, or after the commit.
func (b *Bus) dispatch(ctx context.Context, out outgoing) error {
	if !out.at.IsZero() {
		if tx := inTransaction(ctx); tx != nil {
			return b.delay(ctx, tx, out) // commits with the handler
		}
	}
	if in := incomingFrom(ctx); in != nil {
		if b.outbox != nil && uow.Active(ctx) {
			return b.outbox.Publish(ctx, uow.Tx(ctx), out.topic, out.msg)
		}
		in.outgoing = append(in.outgoing, out)
		return nil
	}
	// During an outage, a Send returns at its context's deadline.
	out.msg.SetContext(ctx)
	return b.publish(out)
}

// publish publishes out now, mandatory where the transport can be: a
// command no queue takes fails instead of being dropped, and an event
// nobody subscribes to is only logged at debug and counted as unrouted.
func (b *Bus) publish(out outgoing) error {
	if !out.at.IsZero() {
		return b.delay(out.msg.Context(), b.cfg.DB, out)
	}
	var err error
	to := out.msg.Metadata.Get(wire.CommandTo) // set by Send
	if m, ok := b.cfg.Transport.(transport.Mandatory); ok {
		err = m.PublishMandatory(out.topic, out.msg)
	} else {
		err = b.cfg.Transport.Publisher().Publish(out.topic, out.msg)
	}
	name := out.msg.Metadata.Get(metadata.MessageType)
	switch {
	case errors.Is(err, transport.ErrNoRoute) && to == "":
		b.cfg.Logger.Debug("bus: no queue takes the event: nobody subscribes to it", "message_type", name, "topic", out.topic, "message_id", out.msg.UUID)
		b.cfg.Metrics.Recorder.Record(name, metrics.Unrouted)
		return nil
	case errors.Is(err, transport.ErrNoRoute):
		return fmt.Errorf("bus: send %s to endpoint %q: no queue takes it (has the endpoint started? is its name right?): %w", name, to, err)
	case err != nil:
		return fmt.Errorf("bus: publish to %s: %w", out.topic, err)
	}
	return nil
}

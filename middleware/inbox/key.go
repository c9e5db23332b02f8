package inbox

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
)

// MaxKeyLength is the longest consumer, source or message ID the inbox
// stores, in bytes.
const MaxKeyLength = 200

// Key identifies one message for one consumer.
type Key struct {
	// Source is who sent the message (for EDI, the interchange sender).
	Source string
	// MessageID identifies the message within its source.
	MessageID string
}

// KeyFunc takes the key from a message. It may read metadata or the payload.
type KeyFunc func(msg *message.Message) (Key, error)

// DefaultKey takes the message ID from the Watermill UUID and the source
// from the sending endpoint's metadata.
func DefaultKey(msg *message.Message) (Key, error) {
	return Key{Source: msg.Metadata.Get(metadata.SourceEndpoint), MessageID: msg.UUID}, nil
}

// MetadataKey returns a KeyFunc that reads the message ID, and the source if
// sourceKey is not empty, from metadata.
func MetadataKey(idKey, sourceKey string) KeyFunc {
	return func(msg *message.Message) (Key, error) {
		k := Key{MessageID: msg.Metadata.Get(idKey)}
		if sourceKey != "" {
			k.Source = msg.Metadata.Get(sourceKey)
		}
		return k, nil
	}
}

// ErrBadKey is matched by the error of a key that cannot be stored.
var ErrBadKey = errors.New("inbox: bad key")

// keyError says why a message's key cannot be stored. It is unrecoverable:
// the bus moves the message to the error topic at once.
type keyError struct {
	Reason string
	Err    error
}

// Error says why the key is bad.
func (e *keyError) Error() string {
	if e.Err != nil {
		return "inbox: bad key: " + e.Reason + ": " + e.Err.Error()
	}
	return "inbox: bad key: " + e.Reason
}

// Is makes errors.Is(err, ErrBadKey) true.
func (e *keyError) Is(target error) bool { return target == ErrBadKey }

// Unwrap returns the key function's error, if any.
func (e *keyError) Unwrap() error { return e.Err }

// Unrecoverable tells the bus not to retry.
func (e *keyError) Unrecoverable() bool { return true }

func checkPart(name, v string, required bool) error {
	switch {
	case required && v == "":
		return &keyError{Reason: name + " is empty: set the message ID (Watermill UUID, or the field Config.Key reads)"}
	case len(v) > MaxKeyLength:
		return &keyError{Reason: fmt.Sprintf("%s is %d bytes, longer than %d", name, len(v), MaxKeyLength)}
	case !dialect.ExactText(v):
		return &keyError{Reason: name + " is not valid UTF-8, or contains a NUL byte"}
	}
	return nil
}

func (k Key) validate(consumer string) error {
	return errors.Join(
		checkPart("consumer", consumer, true),
		checkPart("source", k.Source, false),
		checkPart("message ID", k.MessageID, true),
	)
}

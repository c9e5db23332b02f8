package stale

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
)

// MaxEntityIDLength is the longest entity ID stored, in bytes.
const MaxEntityIDLength = 200

// Version says which entity a message updates and how new the update is.
type Version struct {
	EntityID string
	At       time.Time
}

// VersionFunc takes the version from a message.
type VersionFunc func(msg *message.Message) (Version, error)

// MetadataVersion reads the entity ID and an RFC 3339 timestamp from the
// metadata keys "postroom-entity-id" and "postroom-version".
func MetadataVersion(msg *message.Message) (Version, error) {
	id := msg.Metadata.Get(metadata.EntityID)
	raw := msg.Metadata.Get(metadata.Version)
	if raw == "" {
		return Version{EntityID: id}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		// RFC 3339 allows lower-case "t" and "z"; Go's parser does not.
		if upper, upErr := time.Parse(time.RFC3339Nano, strings.NewReplacer("t", "T", "z", "Z").Replace(raw)); upErr == nil {
			at, err = upper, nil
		}
	}
	if err == nil && at.IsZero() { // not missing: set, and out of range
		return Version{}, &VersionError{Reason: fmt.Sprintf("version %q is out of range: years 1678 to 2261", raw)}
	}
	if err != nil {
		return Version{}, &VersionError{Reason: fmt.Sprintf("version %q is not an RFC 3339 timestamp such as %s", raw, versionExample), Err: err}
	}
	return Version{EntityID: id, At: at}, nil
}

// versionExample is the RFC 3339 timestamp reasons show.
const versionExample = "2026-12-06T10:04:05.123456789Z"

// whereVersionsComeFrom tells a producer, in reasons, how to set a version.
const whereVersionsComeFrom = "set metadata postroom-entity-id and postroom-version (RFC 3339), " +
	"with bus.WithVersion when the producer is postroom, or take them from the payload (Config.Version; bus.WithStale(version))"

// ErrBadVersion is the sentinel every [*VersionError] matches.
var ErrBadVersion = errors.New("stale: bad version")

// VersionError says why a message's version cannot be checked. It is
// unrecoverable: the bus moves the message to the error topic at once.
type VersionError struct {
	Reason string
	Err    error
}

// Error says why the version cannot be checked.
func (e *VersionError) Error() string {
	if e.Err != nil {
		return "stale: bad version: " + e.Reason + ": " + e.Err.Error()
	}
	return "stale: bad version: " + e.Reason
}

// Is makes errors.Is(err, ErrBadVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrBadVersion }

// Unwrap returns the underlying error, if any.
func (e *VersionError) Unwrap() error { return e.Err }

// Unrecoverable tells the bus not to retry.
func (e *VersionError) Unrecoverable() bool { return true }

// Check reports what makes v no version at all (no or unstorable entity
// ID, no time, a time out of range). The bus checks it at Send
// (bus.WithVersion), so such a message fails there, not at each receiver.
func (v Version) Check() error {
	switch {
	case v.EntityID == "":
		return &VersionError{Reason: "entity ID is missing: " + whereVersionsComeFrom}
	case len(v.EntityID) > MaxEntityIDLength:
		return &VersionError{Reason: fmt.Sprintf("entity ID has %d bytes: at most %d", len(v.EntityID), MaxEntityIDLength)}
	case !dialect.ExactText(v.EntityID):
		return &VersionError{Reason: "entity ID must be valid UTF-8 without NUL bytes"}
	case v.At.IsZero():
		return &VersionError{Reason: "version is missing: " + whereVersionsComeFrom}
	case v.At.Year() < 1678 || v.At.Year() > 2261:
		return &VersionError{Reason: fmt.Sprintf("version %s is out of range: years 1678 to 2261", v.At.Format(time.RFC3339Nano))}
	}
	return nil
}

func (v Version) validate(messageType, messageID string, now time.Time, maxSkew time.Duration) error {
	if err := v.Check(); err != nil {
		return err
	}
	switch {
	case v.At.After(now.Add(maxSkew)):
		return &VersionError{Reason: fmt.Sprintf("version %s is more than %s in the future (now %s)",
			v.At.Format(time.RFC3339Nano), maxSkew, now.UTC().Format(time.RFC3339Nano))}
	case messageType == "":
		return &VersionError{Reason: "message type is missing: set metadata postroom-message-type or Config.MessageType"}
	case len(messageType) > 255:
		return &VersionError{Reason: fmt.Sprintf("message type has %d bytes: at most 255", len(messageType))}
	case !dialect.ExactText(messageType):
		return &VersionError{Reason: "message type must be valid UTF-8 without NUL bytes"}
	case messageID == "" || len(messageID) > 200 || !dialect.ExactText(messageID):
		return &VersionError{Reason: "message ID must be set, valid UTF-8 without NUL bytes, and at most 200 bytes (it breaks ties between equal versions)"}
	}
	return nil
}

package bus

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Marshaler turns payloads into bytes and back.
type Marshaler interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
	// ContentType names the encoding, e.g. "application/json".
	ContentType() string
}

// JSON is the default Marshaler.
type JSON struct{}

// Marshal encodes v as JSON.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into v. A payload that is JSON null is an error:
// a message has a value (encoding/json would leave v as it was, and the
// handler would get a zero message).
func (JSON) Unmarshal(data []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return errNullPayload
	}
	return json.Unmarshal(data, v)
}

var errNullPayload = errors.New("the payload is JSON null, not a value of the message's type")

// ContentType is "application/json".
func (JSON) ContentType() string { return "application/json" }

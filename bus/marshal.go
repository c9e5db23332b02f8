package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Marshaler turns payloads into bytes and back.
type Marshaler interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
	// ContentType names the encoding, e.g. "application/json".
	ContentType() string
}

// JSON is the default Marshaler. Its decoding is lenient, as NServiceBus's
// is: unknown fields are ignored and missing ones keep their zero value, so
// a producer a version ahead or behind still gets through.
type JSON struct {
	// DisallowUnknownFields refuses a payload with a field the message's
	// type does not have as malformed, for producers and consumers that
	// change their types together.
	DisallowUnknownFields bool
}

// Marshal encodes v as JSON.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into v. JSON null is an error (the handler would
// get a zero message), and so is invalid UTF-8, which encoding/json would
// silently replace with U+FFFD.
func (j JSON) Unmarshal(data []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return errNullPayload
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("the payload is not valid UTF-8 (byte %d), which JSON must be: encoding it in another character set changes its text", invalidUTF8At(data))
	}
	if !j.DisallowUnknownFields {
		return json.Unmarshal(data, v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF { // json.Unmarshal refuses what follows the value too
		return errors.New("invalid character after the top-level value")
	}
	return nil
}

// invalidUTF8At returns the offset of data's first invalid UTF-8 byte.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}

var errNullPayload = errors.New("the payload is JSON null, not a value of the message's type")

// ContentType is "application/json".
func (JSON) ContentType() string { return "application/json" }

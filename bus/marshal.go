package bus

import "encoding/json"

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

// Unmarshal decodes JSON into v.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// ContentType is "application/json".
func (JSON) ContentType() string { return "application/json" }

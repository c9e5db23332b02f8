package dialect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// ReadMessage completes r, a message row scanned with err, also one
// another program inserted, by the rule in transport/sql/doc.go ("Rows
// from other programs"). watermill-sql's adapters fail on non-string
// values and refetch such a row forever; here metadata that is not a JSON
// object sets metadata.TransportError, so the bus moves it aside.
func ReadMessage(r wsql.Row, err error) (wsql.Row, error) {
	if err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan message row: %w", err)
	}
	r.Msg = message.NewMessage(string(r.UUID), r.Payload)
	md, err := ForeignMetadata(r.Metadata)
	// Only this read says how the message was delivered: control keys from
	// a producer or a replayed copy would send it to the error topic.
	transport.DropControl(md)
	if err != nil { // kept as text for the error topic, so the operator sees what the producer wrote
		md = message.Metadata{metadata.TransportError: "sql: " + err.Error(),
			metadata.UnreadMetadata: strings.ToValidUTF8(string(r.Metadata), "\uFFFD")}
	}
	r.Msg.Metadata = md
	return r, nil
}

// ForeignMetadata reads the metadata column of a message row by the rule
// of ReadMessage. Empty (NULL) is no metadata.
func ForeignMetadata(raw []byte) (message.Metadata, error) {
	md := message.Metadata{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return md, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("metadata is not a JSON object: %w", err)
	}
	for k, v := range fields {
		var str string // null leaves it ""
		if json.Unmarshal(v, &str) == nil {
			md[k] = str
		} else {
			md[k] = string(v)
		}
	}
	return md, nil
}

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

// ReadMessage completes r, a row of a message table scanned with err,
// also one another program inserted: metadata must be a JSON object; a
// string value is taken as it is, null as "", any other value (number,
// boolean, object, array) as its JSON text. watermill-sql's own adapters
// fail on anything but string values, and a row that fails to read is
// fetched again at every poll, forever, holding up every row behind it.
// Metadata that is not a JSON object (or not JSON) leaves the message with
// metadata.TransportError set to the reason, so the bus moves it to the
// error topic.
func ReadMessage(r wsql.Row, err error) (wsql.Row, error) {
	if err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan message row: %w", err)
	}
	r.Msg = message.NewMessage(string(r.UUID), r.Payload)
	md, err := ForeignMetadata(r.Metadata)
	// Only this read says how the message was delivered: the keys set by a
	// producer (or kept by a replayed copy) would send the message to the
	// error topic at every delivery.
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

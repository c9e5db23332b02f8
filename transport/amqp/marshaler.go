package amqp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// Metadata keys [Marshaler.Unmarshal] fills from a foreign producer's AMQP
// properties, when not empty and no header of that name is present.
const (
	// MetadataContentType is the content_type property.
	MetadataContentType = "amqp-content-type"
	// MetadataCorrelationID is the correlation_id property.
	MetadataCorrelationID = "amqp-correlation-id"
	// MetadataType is the type property.
	MetadataType = "amqp-type"
)

// deliveryCountHeader is where quorum queues count a message's unacked
// earlier deliveries (nacks and crashes).
const deliveryCountHeader = "x-delivery-count"

// uuidHeader is the header of the Watermill UUID.
const uuidHeader = wamqp.DefaultMessageUUIDHeaderKey

// ErrorNoID is the reason [Marshaler.Unmarshal] puts in
// [metadata.TransportError] on a message that carries no ID.
const ErrorNoID = "amqp: message has no ID: set the message_id property or the " + wamqp.DefaultMessageUUIDHeaderKey + " header"

// Marshaler converts Watermill messages to AMQP publishings and back
// (watermill-amqp's Marshaler). Marshal is watermill-amqp's
// DefaultMarshaler plus the message_id property, so either marshaler's
// users interoperate. Unmarshal never fails: what it cannot read goes in
// [metadata.TransportError] (see the package documentation).
type Marshaler struct{}

var _ wamqp.Marshaler = Marshaler{}

// Marshal returns the publishing of msg.
func (Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	p, err := wamqp.DefaultMarshaler{}.Marshal(msg)
	if err != nil {
		return p, err
	}
	p.MessageId = msg.UUID
	return p, nil
}

// deliveryID is d's message ID: the UUID header if not empty, else the
// message_id property; the error says why the header could not be read.
func deliveryID(d amqp091.Delivery) (string, error) {
	var err error
	id := ""
	if v, ok := d.Headers[uuidHeader]; ok {
		id, err = headerString(v)
	}
	if id == "" {
		id = d.MessageId
	}
	return id, err
}

// Unmarshal returns the message of d. Its error is always nil.
func (Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	var problems []string
	const idKey = uuidHeader
	id, err := deliveryID(d)
	if err != nil {
		problems = append(problems, fmt.Sprintf("header %s: %v", idKey, err))
	}

	md := make(message.Metadata, len(d.Headers)+3)
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		if k == idKey {
			continue
		}
		s, err := headerString(d.Headers[k])
		if err != nil {
			problems = append(problems, fmt.Sprintf("header %s: %v", k, err))
			continue
		}
		md[k] = s
	}
	for key, value := range map[string]string{
		MetadataContentType:   d.ContentType,
		MetadataCorrelationID: d.CorrelationId,
		MetadataType:          d.Type,
	} {
		if _, ok := md[key]; !ok && value != "" {
			md[key] = value
		}
	}

	// Control keys a producer set (or a replayed copy kept) would move the
	// message aside at once; x-delivery-count is the broker's only on a
	// redelivery.
	transport.DropControl(md)
	c, counted := md[deliveryCountHeader]
	delete(md, deliveryCountHeader) // moved, so a copy sent on does not carry it
	// A redelivery is marked, and carries the queue's count where it has
	// one (quorum queues; classic queues from RabbitMQ 4.3): the bus counts
	// it as the queue type says (transport.Capabilities), the count a floor.
	if d.Redelivered {
		md[metadata.Redelivered] = metadata.RedeliveredYes
		if counted {
			md[metadata.DeliveryCount] = c
		}
	}

	reasons := make([]string, 0, len(problems)+1)
	if id == "" {
		reasons = append(reasons, ErrorNoID)
	}
	for _, p := range problems {
		reasons = append(reasons, "amqp: "+p)
	}
	if len(reasons) > 0 {
		md[metadata.TransportError] = strings.Join(reasons, "; ")
	}

	msg := message.NewMessage(id, d.Body)
	msg.Metadata = md
	return msg, nil
}

// headerString converts an AMQP header value, as amqp091-go decodes it, to
// the metadata string [Marshaler.Unmarshal] sets: strings as they are, nil
// as "", booleans and integers as Go prints them, floats with strconv 'g',
// decimals in plain notation, timestamps as RFC 3339 UTC, byte arrays as
// text if valid UTF-8 else base64, tables and arrays as JSON (keys sorted;
// NaN and infinities as strings). Any other type is an error. The table in
// docs/transports-amqp-notes.md gives examples.
func headerString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case nil:
		return "", nil
	case bool:
		return strconv.FormatBool(x), nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case amqp091.Decimal:
		return decimalString(x), nil
	case time.Time:
		return x.UTC().Format(time.RFC3339), nil
	case []byte:
		return bytesString(x), nil
	case amqp091.Table, []any:
		j, err := jsonValue(x)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(j)
		if err != nil {
			return "", fmt.Errorf("cannot write %T as JSON: %w", x, err)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("type %T cannot be converted to a string", v)
}

// jsonValue converts a value inside a table or array to one encoding/json
// writes as headerString documents.
func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return x, nil
	case float32:
		return floatJSON(float64(x), 32), nil
	case float64:
		return floatJSON(x, 64), nil
	case amqp091.Decimal:
		return json.Number(decimalString(x)), nil
	case time.Time:
		return x.UTC().Format(time.RFC3339), nil
	case []byte:
		return bytesString(x), nil
	case amqp091.Table:
		out := make(map[string]any, len(x))
		for k, e := range x {
			j, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = j
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			j, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = j
		}
		return out, nil
	}
	return nil, fmt.Errorf("type %T cannot be converted to JSON", v)
}

func floatJSON(f float64, bits int) any {
	s := strconv.FormatFloat(f, 'g', -1, bits)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return s
	}
	return json.Number(s)
}

// decimalString writes d as Value × 10^-Scale in plain decimal notation.
func decimalString(d amqp091.Decimal) string {
	v := int64(d.Value)
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	digits := strconv.FormatInt(v, 10)
	scale := int(d.Scale)
	if scale == 0 {
		return sign + digits
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}

func bytesString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return base64.StdEncoding.EncodeToString(b)
}

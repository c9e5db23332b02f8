package amqp_test

import (
	"testing"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestForeignProducer: messages a plain amqp091 client publishes (every
// header type, only the message_id property, no ID at all, a body that is
// not JSON) are each delivered once, with their headers converted as
// documented, and do not hold up the good messages behind them. With
// watermill-amqp's DefaultMarshaler the first one is nacked and requeued
// forever, and nothing after it arrives.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("foreign_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	tr := newTransport(t, amqp.Config{})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	got := consume(t, sub, topic, nil)

	ts := time.Date(2024, 5, 1, 12, 30, 0, 0, time.UTC)
	good := func(n string) amqp091.Publishing {
		return amqp091.Publishing{
			Headers: amqp091.Table{wamqp.DefaultMessageUUIDHeaderKey: "good-" + n, "case": "good-" + n},
			Body:    []byte(`{"ok":true}`),
		}
	}
	sent := []amqp091.Publishing{
		{
			Headers: amqp091.Table{
				wamqp.DefaultMessageUUIDHeaderKey: "all-types",
				"case":                            "all-types",
				"int8":                            int8(-8),
				"uint8":                           uint8(8),
				"int16":                           int16(-16),
				"int32":                           int32(32),
				"int64":                           int64(1 << 40),
				"bool":                            true,
				"float32":                         float32(0.5),
				"float64":                         2.25,
				"decimal":                         amqp091.Decimal{Scale: 2, Value: 1999},
				"timestamp":                       ts,
				"bytes-text":                      []byte("plain"),
				"bytes-binary":                    []byte{0xde, 0xad, 0xbe, 0xef},
				"void":                            nil,
				"table":                           amqp091.Table{"x": int32(1), "y": "z"},
				"array":                           []any{"a", int32(2), false},
			},
			ContentType:   "application/json",
			CorrelationId: "corr-1",
			Type:          "orders.Placed",
			Body:          []byte(`{"ok":true}`),
		},
		good("1"),
		{MessageId: "prop-only", Headers: amqp091.Table{"case": "prop-only"}, Body: []byte(`{}`)},
		good("2"),
		{Headers: amqp091.Table{"case": "no-id"}, Body: []byte(`{}`)},
		good("3"),
		{MessageId: "not-json", Headers: amqp091.Table{"case": "not-json"}, Body: []byte("\x00\x01 not json <xml/>")},
		good("4"),
	}
	for _, p := range sent {
		a.publish(topic, p)
	}

	byCase := func() map[string][]*message.Message {
		m := map[string][]*message.Message{}
		for _, msg := range got.all() {
			m[msg.Metadata.Get("case")] = append(m[msg.Metadata.Get("case")], msg)
		}
		return m
	}
	require.Eventually(t, func() bool { return len(byCase()) == len(sent) }, 10*time.Second, 20*time.Millisecond,
		"not every message arrived: %v", byCase())
	time.Sleep(settle) // a redelivery loop would show as more deliveries
	seen := byCase()
	require.Len(t, got.all(), len(sent), "a message was delivered more than once")
	for c, msgs := range seen {
		require.Len(t, msgs, 1, c)
	}

	all := seen["all-types"][0]
	require.Equal(t, "all-types", all.UUID)
	require.Equal(t, message.Metadata{
		"case":                     "all-types",
		"int8":                     "-8",
		"uint8":                    "8",
		"int16":                    "-16",
		"int32":                    "32",
		"int64":                    "1099511627776",
		"bool":                     "true",
		"float32":                  "0.5",
		"float64":                  "2.25",
		"decimal":                  "19.99",
		"timestamp":                "2024-05-01T12:30:00Z",
		"bytes-text":               "plain",
		"bytes-binary":             "3q2+7w==",
		"void":                     "",
		"table":                    `{"x":1,"y":"z"}`,
		"array":                    `["a",2,false]`,
		amqp.MetadataContentType:   "application/json",
		amqp.MetadataCorrelationID: "corr-1",
		amqp.MetadataType:          "orders.Placed",
	}, all.Metadata)

	require.Equal(t, "prop-only", seen["prop-only"][0].UUID)
	require.Empty(t, seen["prop-only"][0].Metadata.Get(metadata.TransportError))

	noID := seen["no-id"][0]
	require.Empty(t, noID.UUID)
	require.Equal(t, amqp.ErrorNoID, noID.Metadata.Get(metadata.TransportError))
	require.Contains(t, amqp.ErrorNoID, "message_id")

	require.Equal(t, "\x00\x01 not json <xml/>", string(seen["not-json"][0].Payload))
	for _, n := range []string{"1", "2", "3", "4"} {
		require.Equal(t, "good-"+n, seen["good-"+n][0].UUID)
		require.Empty(t, seen["good-"+n][0].Metadata.Get(metadata.TransportError))
	}
	// In the order sent: nothing was requeued behind the others.
	var order []string
	for _, msg := range got.all() {
		order = append(order, msg.Metadata.Get("case"))
	}
	require.Equal(t, []string{"all-types", "good-1", "prop-only", "good-2", "no-id", "good-3", "not-json", "good-4"}, order)
}

// TestPostroomRoundTrip: what the transport's publisher sends its
// subscriber reads back with the same ID, metadata and payload.
func TestPostroomRoundTrip(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("roundtrip_")
	a := newAdmin(t)
	a.cleanup(topic, "g")
	tr := newTransport(t, amqp.Config{})
	sub, err := tr.Subscriber("g", 1)
	require.NoError(t, err)
	got := consume(t, sub, topic, nil)

	msg := message.NewMessage("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", []byte(`{"a":1}`))
	msg.Metadata.Set(metadata.MessageType, "orders.Placed")
	require.NoError(t, tr.Publisher().Publish(topic, msg))
	require.Eventually(t, func() bool { return len(got.all()) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.True(t, got.all()[0].Equals(msg), "%+v", got.all()[0].Metadata)
}

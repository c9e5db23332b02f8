package amqp_test

import (
	"testing"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport/amqp"
)

// TestUnmarshalNeverFails: a header of an unknown type and a missing ID set
// metadata.TransportError and still return the message with the rest of
// its metadata.
func TestUnmarshalNeverFails(t *testing.T) {
	t.Parallel()
	msg, err := amqp.Marshaler{}.Unmarshal(amqp091.Delivery{
		Headers: amqp091.Table{"bad": struct{}{}, "good": int32(5)},
		Body:    []byte("not json"),
	})
	require.NoError(t, err)
	require.Empty(t, msg.UUID)
	require.Equal(t, "5", msg.Metadata.Get("good"))
	require.NotContains(t, msg.Metadata, "bad")
	require.Equal(t, amqp.ErrorNoID+"; amqp: header bad: type struct {} cannot be converted to a string",
		msg.Metadata.Get(metadata.TransportError))
	require.Equal(t, "not json", string(msg.Payload))
}

// TestUnmarshalIDOrder: the _watermill_message_uuid header wins, then the
// message_id property; an empty header falls through.
func TestUnmarshalIDOrder(t *testing.T) {
	t.Parallel()
	m := amqp.Marshaler{}
	for _, c := range []struct {
		name    string
		headers amqp091.Table
		propID  string
		want    string
	}{
		{"header", amqp091.Table{wamqp.DefaultMessageUUIDHeaderKey: "from-header"}, "from-property", "from-header"},
		{"bytes header", amqp091.Table{wamqp.DefaultMessageUUIDHeaderKey: []byte("from-bytes")}, "", "from-bytes"},
		{"property", nil, "from-property", "from-property"},
		{"empty header", amqp091.Table{wamqp.DefaultMessageUUIDHeaderKey: ""}, "from-property", "from-property"},
	} {
		msg, err := m.Unmarshal(amqp091.Delivery{Headers: c.headers, MessageId: c.propID})
		require.NoError(t, err)
		require.Equal(t, c.want, msg.UUID, c.name)
		require.Empty(t, msg.Metadata.Get(metadata.TransportError), c.name)
		require.NotContains(t, msg.Metadata, wamqp.DefaultMessageUUIDHeaderKey, c.name)
	}
}

// TestUnmarshalProperties: content_type, correlation_id and type become
// metadata unless a header of the same name is there.
func TestUnmarshalProperties(t *testing.T) {
	t.Parallel()
	msg, err := amqp.Marshaler{}.Unmarshal(amqp091.Delivery{
		MessageId:     "id",
		ContentType:   "application/json",
		CorrelationId: "corr",
		Type:          "OrderPlaced",
		Headers:       amqp091.Table{amqp.MetadataType: "from-header"},
	})
	require.NoError(t, err)
	require.Equal(t, message.Metadata{
		amqp.MetadataContentType:   "application/json",
		amqp.MetadataCorrelationID: "corr",
		amqp.MetadataType:          "from-header",
	}, msg.Metadata)
}

// TestMarshalerInteroperatesWithDefault: what either marshaler writes the
// other reads back unchanged.
func TestMarshalerInteroperatesWithDefault(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", []byte(`{"a":1}`))
	msg.Metadata.Set(metadata.MessageType, "orders.Placed")

	ours, err := amqp.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	theirs, err := wamqp.DefaultMarshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, theirs.Headers, ours.Headers)
	require.Equal(t, theirs.DeliveryMode, ours.DeliveryMode)
	require.Equal(t, msg.UUID, ours.MessageId)

	for _, p := range []amqp091.Publishing{ours, theirs} {
		d := amqp091.Delivery{Headers: p.Headers, Body: p.Body, MessageId: p.MessageId}
		a, err := amqp.Marshaler{}.Unmarshal(d)
		require.NoError(t, err)
		b, err := wamqp.DefaultMarshaler{}.Unmarshal(d)
		require.NoError(t, err)
		for _, got := range []*message.Message{a, b} {
			require.True(t, got.Equals(msg), "%v %v", got.UUID, got.Metadata)
		}
	}
}

// TestUnmarshalIgnoresATransportErrorHeader: only the transport's own read
// marks a message unreadable; the header set by a producer (or kept by a
// replayed copy) would send a good message to the error topic every time.
func TestUnmarshalIgnoresATransportErrorHeader(t *testing.T) {
	t.Parallel()
	msg, err := amqp.Marshaler{}.Unmarshal(amqp091.Delivery{MessageId: "m-1",
		Headers: amqp091.Table{metadata.TransportError: "amqp: message has no ID"}})
	require.NoError(t, err)
	require.Empty(t, msg.Metadata.Get(metadata.TransportError))
	msg, err = amqp.Marshaler{}.Unmarshal(amqp091.Delivery{Headers: amqp091.Table{metadata.TransportError: "made up"}})
	require.NoError(t, err)
	require.Equal(t, amqp.ErrorNoID, msg.Metadata.Get(metadata.TransportError), "the transport's own reason, not the header's")
}

// TestUnmarshalRedelivered: the broker's redelivered flag becomes
// metadata.Redelivered where the broker counts nothing (classic queues),
// and only there; the header set by a producer (or kept by a copy moved
// and replayed) is not trusted, or every delivery of it would count.
func TestUnmarshalRedelivered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		d    amqp091.Delivery
		want string
	}{
		{"first delivery", amqp091.Delivery{MessageId: "m"}, ""},
		{"redelivered, classic queue", amqp091.Delivery{MessageId: "m", Redelivered: true}, "true"},
		{"redelivered, quorum queue: marked too", amqp091.Delivery{MessageId: "m", Redelivered: true, Headers: amqp091.Table{"x-delivery-count": int64(1)}}, "true"},
		{"a producer's header", amqp091.Delivery{MessageId: "m", Headers: amqp091.Table{metadata.Redelivered: "true"}}, ""},
	} {
		msg, err := amqp.Marshaler{}.Unmarshal(c.d)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, msg.Metadata.Get(metadata.Redelivered), c.name)
	}
}

package bus_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
)

// TestJSONDecoding: lenient by default (unknown fields ignored, missing
// ones zero); with DisallowUnknownFields a payload of another shape is
// refused. Both refuse null, trailing data, two values and bytes that are
// not UTF-8.
func TestJSONDecoding(t *testing.T) {
	type order struct {
		OrderID string
		Amount  int
	}
	lenient, strict := bus.JSON{}, bus.JSON{DisallowUnknownFields: true}
	var o order
	require.NoError(t, lenient.Unmarshal([]byte(`{"OrderNo":"x","Amount":12}`), &o))
	require.Equal(t, order{Amount: 12}, o)
	require.ErrorContains(t, strict.Unmarshal([]byte(`{"OrderNo":"x","Amount":12}`), &order{}), `unknown field "OrderNo"`)
	require.NoError(t, strict.Unmarshal([]byte(` {"OrderID":"o-1","Amount":12} `), &o))
	require.Equal(t, order{OrderID: "o-1", Amount: 12}, o)
	require.NoError(t, strict.Unmarshal([]byte(`{}`), &order{}), "a missing field is the handler's to check")
	for _, m := range []bus.JSON{lenient, strict} {
		require.Error(t, m.Unmarshal([]byte(`null`), &order{}))
		require.Error(t, m.Unmarshal([]byte(`{"OrderID":"a"} junk`), &order{}))
		require.Error(t, m.Unmarshal([]byte(`{"OrderID":"a"}{"OrderID":"b"}`), &order{}))
		// Not UTF-8 (Latin-1 'é'): refused, not handled with U+FFFD in its place.
		require.ErrorContains(t, m.Unmarshal([]byte("{\"OrderID\":\"caf\xe9\"}"), &order{}), "not valid UTF-8 (byte 15)")
		var utf order
		require.NoError(t, m.Unmarshal([]byte(`{"OrderID":"café ☕ 🧾"}`), &utf))
		require.Equal(t, "café ☕ 🧾", utf.OrderID)
	}
}

package amqp

import (
	"math"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func TestHeaderString(t *testing.T) {
	t.Parallel()
	ts := time.Date(2024, 5, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	for _, c := range []struct {
		in   any
		want string
	}{
		{"text", "text"},
		{nil, ""},
		{true, "true"},
		{false, "false"},
		{int8(-8), "-8"},
		{uint8(200), "200"},
		{int16(-16), "-16"},
		{uint16(16), "16"},
		{int32(-32), "-32"},
		{uint32(32), "32"},
		{int64(-1 << 40), "-1099511627776"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{42, "42"},
		{float32(1.1), "1.1"},
		{1.5, "1.5"},
		{1e21, "1e+21"},
		{math.NaN(), "NaN"},
		{math.Inf(-1), "-Inf"},
		{amqp091.Decimal{Scale: 2, Value: 12345}, "123.45"},
		{amqp091.Decimal{Scale: 3, Value: -5}, "-0.005"},
		{amqp091.Decimal{Scale: 0, Value: 7}, "7"},
		{amqp091.Decimal{Scale: 1, Value: math.MinInt32}, "-214748364.8"},
		{ts, "2024-05-01T12:00:00Z"},
		{[]byte("héllo"), "héllo"},
		{[]byte{0xff, 0x00, 0xfe}, "/wD+"},
		{amqp091.Table{"b": int32(1), "a": "x", "n": nil}, `{"a":"x","b":1,"n":null}`},
		{[]any{int64(1), "two", 3.5, true, amqp091.Decimal{Scale: 1, Value: 15}, ts, []byte{0xff}, math.Inf(1)},
			`[1,"two",3.5,true,1.5,"2024-05-01T12:00:00Z","/w==","+Inf"]`},
		{amqp091.Table{"nested": amqp091.Table{"list": []any{amqp091.Table{"k": float32(0.25)}}}}, `{"nested":{"list":[{"k":0.25}]}}`},
	} {
		got, err := headerString(c.in)
		require.NoError(t, err, "%#v", c.in)
		require.Equal(t, c.want, got, "%#v", c.in)
	}

	_, err := headerString(struct{}{})
	require.ErrorContains(t, err, "struct {}")
	_, err = headerString([]any{complex(1, 2)})
	require.ErrorContains(t, err, "complex128")
}

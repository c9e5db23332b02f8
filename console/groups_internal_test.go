package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReasonShape(t *testing.T) {
	for reason, shape := range map[string]string{
		"customer 17 has no VAT number":                                     "customer … has no VAT number",
		"charge order-42: HTTP 503 after 1.5 s":                             "charge order-…: HTTP 503 after … s",
		"invoice 0198c7a2-5b1e-7c3d-9f00-1234567890ab exists":               "invoice … exists",
		"blob deadbeef12 missing; int64 overflow":                           "blob … missing; int64 overflow",
		"tax service down":                                                  "tax service down",
		"first\r\nsecond 2":                                                 "first\nsecond …",
		"customer … has no VAT number":                                      "customer … has no VAT number",
		"stale: bad version: version \"yesterday\" is not an RFC 3339 time": "stale: bad version: version \"yesterday\" is not an RFC … time",
		// codes tell failures apart: kept
		"unexpected status 503":                           "unexpected status 503",
		"unexpected status 400":                           "unexpected status 400",
		"exit status 137":                                 "exit status 137",
		"insert 7: duplicate key (SQLSTATE 23505)":        "insert …: duplicate key (SQLSTATE 23505)",
		"Error 1062 (23000): Duplicate entry '9' for key": "Error 1062 (…): Duplicate entry '…' for key",
		"error code: 42, order 8":                         "error code: 42, order …",
		"bad bytes \xff\xfe and NUL \x00 in order 5":      "bad bytes \uFFFD and NUL \uFFFD in order …",
		"customer_17 has no VAT number (not masked: _17)": "customer_17 has no VAT number (not masked: _17)",
	} {
		require.Equal(t, shape, reasonShape(reason), reason)
		require.Equal(t, shape, reasonShape(shape), "a shape is its own shape: %q", shape)
	}
}

// TestAsPosted: what a browser posts back from a page equals what the
// console compares it with.
func TestAsPosted(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"a\r\nb\rc\nd":       "a\nb\nc\nd",
		"nul\x00here":        "nul\uFFFDhere",
		"bad\xe2\x82 bytes":  "bad\uFFFD bytes",
		"bad\xff\xfe\xfd":    "bad\uFFFD",
		"given \uFFFD\uFFFD": "given \uFFFD",
	} {
		require.Equal(t, want, asPosted(in), "%q", in)
		require.Equal(t, want, asPosted(want), "idempotent: %q", want)
	}
}

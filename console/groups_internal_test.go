package console

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metadata"
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

// TestFailureGroupsAndSelectionsByEndpointGroup: copies of one message
// that the handlers of two endpoints (one name) failed are a failure
// group each; a selection that names a group takes that group's copies
// only ("" those without one), and one that names none takes them all.
func TestFailureGroupsAndSelectionsByEndpointGroup(t *testing.T) {
	copyOf := func(group string) *message.Message {
		msg := message.NewMessage("evt-1", []byte("{}"))
		msg.Metadata = message.Metadata{metadata.ErrorHandler: "trialu.Evt", metadata.ErrorReason: "boom"}
		if group != "" {
			msg.Metadata.Set(metadata.ErrorGroup, group)
		}
		return msg
	}
	msgs := []*message.Message{copyOf("trialu_a.trialu.Evt"), copyOf("trialu_b.trialu.Evt"), copyOf("trialu_a.trialu.Evt"), copyOf("")}
	var list []failedMessage
	for _, msg := range msgs {
		list = append(list, failedOf(msg, false))
	}
	var keys []string
	for _, g := range groupFailed(list) {
		keys = append(keys, fmt.Sprintf("%s|%s|%s|%d", g.Handler, g.Group, g.Reason, len(g.Messages)))
	}
	require.Equal(t, []string{"trialu.Evt|trialu_a.trialu.Evt|boom|2", "trialu.Evt|trialu_b.trialu.Evt|boom|1", "trialu.Evt||boom|1"}, keys)

	for query, want := range map[string][]bool{
		"id=evt-1":                           {true, true, true, true},
		"id=evt-1&group=trialu_a.trialu.Evt": {true, false, true, false},
		"id=evt-1&group=":                    {false, false, false, true},
		"handler=trialu.Evt&reason=boom&group=trialu_b.trialu.Evt": {false, true, false, false},
		"handler=trialu.Evt&reason=boom":                           {true, true, true, true},
		"all=1&group=trialu_b.trialu.Evt":                          {false, true, false, false},
	} {
		s, err := selectionOf(httptest.NewRequest("GET", "/failed/confirm?"+query, nil))
		require.NoError(t, err, query)
		var got []bool
		for _, msg := range msgs {
			got = append(got, s.match(msg))
		}
		require.Equal(t, want, got, query)
	}
	s, err := selectionOf(httptest.NewRequest("GET", "/failed/confirm?id=evt-1&group=trialu_a.trialu.Evt", nil))
	require.NoError(t, err)
	require.Equal(t, "message evt-1 of endpoint group trialu_a.trialu.Evt", s.String())
	s, err = selectionOf(httptest.NewRequest("GET", "/failed/confirm?id=evt-1&group=", nil))
	require.NoError(t, err)
	require.Equal(t, "message evt-1 without an endpoint group (not moved there by a bus)", s.String())
	s, err = selectionOf(httptest.NewRequest("GET", "/failed/confirm?id=evt-1", nil))
	require.NoError(t, err)
	require.Equal(t, "message evt-1", s.String(), "no group: every copy, as before")
}

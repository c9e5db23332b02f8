package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTablesEscapeWhatProducersSent: message IDs and reasons come from
// producers. An escape sequence, a newline or tabwriter's escape byte in
// one is printed quoted: it neither reaches the terminal raw nor forges or
// misaligns a row (printed raw, a reason can forge a row in `errors
// list`).
func TestTablesEscapeWhatProducersSent(t *testing.T) {
	var out bytes.Buffer
	list := []failedMessage{
		{ID: "\x1b[31mRED\x1b[0m", Handler: "h", Attempts: 1, At: "now", Reason: "r"},
		{ID: "a\nFAKE-ID  fp.Fake  9  forged row", Handler: "h", Attempts: 1, At: "now", Reason: "r"},
		{ID: "bad\xffutf8", Handler: "h", Attempts: 1, At: "now", Reason: "tab\there"},
		{ID: "plain-id", Handler: "billing.CreateInvoice", Attempts: 4, At: "now", Reason: "déjà vu"},
	}
	require.NoError(t, printFailed(&out, list, false))
	text := out.String()
	require.NotContains(t, text, "\x1b")
	require.NotContains(t, text, "\xff")
	require.Len(t, strings.Split(strings.TrimRight(text, "\n"), "\n"), 1+len(list), "one line per message")
	require.Contains(t, text, `"\x1b[31mRED\x1b[0m"`)
	require.Contains(t, text, "plain-id")
	require.Contains(t, text, "déjà vu", "printable text is left as it is")
}

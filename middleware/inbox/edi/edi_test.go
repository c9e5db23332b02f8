package edi_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/inbox/edi"
)

const (
	x12     = "ISA*00*          *00*          *ZZ*ACMESUPPLY     *ZZ*BUYERCO        *261202*1530*U*00401*000000905*0*P*>~GS*IN*ACMESUPPLY*BUYERCO*20261202*1530*905*X*004010~ST*810*0001~"
	edifact = "UNA:+.? 'UNB+UNOC:3+SUPPLIER?+1:14+BUYER:14+261202:1530+INV00042'UNH+1+INVOIC:D:96A:UN'"
)

func TestParseInterchange(t *testing.T) {
	ic, err := edi.ParseInterchange([]byte(x12))
	require.NoError(t, err)
	require.Equal(t, edi.Interchange{Sender: "ZZ:ACMESUPPLY", Control: "000000905"}, ic)

	ic, err = edi.ParseInterchange([]byte(edifact))
	require.NoError(t, err)
	require.Equal(t, edi.Interchange{Sender: "SUPPLIER+1", Control: "INV00042"}, ic, "the release character escapes '+'")

	ic, err = edi.ParseInterchange([]byte("UNB+UNOA:1+SENDER+RECV+261202:1530+CTRL7'"))
	require.NoError(t, err)
	require.Equal(t, edi.Interchange{Sender: "SENDER", Control: "CTRL7"}, ic, "no UNA: default separators")

	for _, bad := range []string{"", "{\"json\":1}", "ISA*00*", "UNB+UNOA:1+SENDER'", "UNA:+"} {
		_, err := edi.ParseInterchange([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestEDIKey(t *testing.T) {
	k, err := edi.Key(message.NewMessage("any-uuid", []byte(x12)))
	require.NoError(t, err)
	require.Equal(t, inbox.Key{Source: "ZZ:ACMESUPPLY", MessageID: "000000905"}, k)
}

// FuzzParseInterchange: any payload gives an interchange or an error, never
// a panic, and a parsed interchange always has a sender and a control.
func FuzzParseInterchange(f *testing.F) {
	for _, seed := range []string{x12, edifact, "UNB+UNOA:1+S+R+1:1+C'", "ISA", "UNA", "UNA:+.? 'UNB+'"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		ic, err := edi.ParseInterchange(payload)
		if err == nil && (ic.Sender == "" || ic.Control == "") {
			t.Fatalf("parsed %q into %+v", payload, ic)
		}
	})
}

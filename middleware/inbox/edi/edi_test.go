package edi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/inbox/edi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	x12     = "ISA*00*          *00*          *ZZ*ACMESUPPLY     *ZZ*BUYERCO        *261202*1530*U*00401*000000905*0*P*>~GS*IN*ACMESUPPLY*BUYERCO*20261202*1530*905*X*004010~ST*810*0001~"
	edifact = "UNA:+.? 'UNB+UNOC:3+SUPPLIER?+1:14+BUYER:14+261202:1530+INV00042'UNH+1+INVOIC:D:96A:UN'"
	gs      = "GS*IN*ACMESUPPLY*BUYERCO*20261202*1530*905*X*004010~"
)

// isa is a fixed-width ISA segment with the given element separator,
// sender (ISA06, padded to 15), control number (ISA13), component separator
// (ISA16) and segment terminator.
func isa(element, sender, control, component, terminator string) string {
	return strings.Join([]string{"ISA", "00", "          ", "00", "          ", "ZZ", fmt.Sprintf("%-15s", sender),
		"ZZ", "BUYERCO        ", "261202", "1530", "U", "00401", control, "0", "P", component}, element) + terminator
}

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

// TestParseInterchangeEnvelopes reads the sender and control reference
// with the service characters each envelope declares.
func TestParseInterchangeEnvelopes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		payload string
		want    edi.Interchange
	}{
		{
			name:    "UNA4 space: no release character, spaces are data",
			payload: "UNA:+.  'UNB+UNOC:3+ACME CORP:ZZ+BUYER:ZZ+261202:1530+CTRL 1'UNH+1+INVOIC:D:96A:UN'",
			want:    edi.Interchange{Sender: "ACME CORP", Control: "CTRL 1"},
		},
		{
			name:    "UNA4 space: a space before a data element separator does not release it",
			payload: "UNA:+.  'UNB+UNOC:3+ACME +BUYER+261202:1530+00001+RREF+INVOIC'UNH+1+INVOIC:D:96A:UN'",
			want:    edi.Interchange{Sender: "ACME ", Control: "00001"},
		},
		{
			name:    "UNA4 space: a space before the segment terminator does not release it",
			payload: "UNA:+.  'UNB+UNOC:3+ACME+BUYER+261202:1530+CTRL 'UNH+1+INVOIC:D:96A:UN'",
			want:    edi.Interchange{Sender: "ACME", Control: "CTRL "},
		},
		{
			name:    "UNA4 space: '?' is data",
			payload: "UNA:+.  'UNB+UNOC:3+WHO?+BUYER+261202:1530+C?1'",
			want:    edi.Interchange{Sender: "WHO?", Control: "C?1"},
		},
		{
			name:    "UNA4 space and a UNA5 repetition separator",
			payload: "UNA:+. *'UNB+UNOC:4+ACME CORP+BUYER+20261202:1530+CTRL*1'",
			want:    edi.Interchange{Sender: "ACME CORP", Control: "CTRL*1"},
		},
		{
			name:    "UNA5 space is not the release character",
			payload: "UNA:+.? 'UNB+UNOC:3+ACME?+CO +BUYER+261202:1530+C 1'",
			want:    edi.Interchange{Sender: "ACME+CO ", Control: "C 1"},
		},
		{
			name:    "UNA5 repetition separator is data in UNB",
			payload: "UNA:+.?*'UNB+UNOC:4+ACME*1+BUYER+20261202:1530+C*7'",
			want:    edi.Interchange{Sender: "ACME*1", Control: "C*7"},
		},
		{
			name:    "UNA with separators of its own",
			payload: "UNA|*,\\ ~UNB*UNOC|3*ACME\\*CO|ZZ*BUYER*261202|1530*C\\~1~UNH*1~",
			want:    edi.Interchange{Sender: "ACME*CO", Control: "C~1"},
		},
		{
			name:    "no UNA, level B: IS1, IS3, IS4 and no release character",
			payload: "UNB\x1dUNOB\x1f3\x1dACME+CO?\x1dBUYER\x1d261202\x1f1530\x1dCTRL'1\x1cUNH\x1d1\x1c",
			want:    edi.Interchange{Sender: "ACME+CO?", Control: "CTRL'1"},
		},
		{
			name:    "X12 element separator above 0x7f",
			payload: isa("\xa7", "ACMESUPPLY", "000000905", ">", "~") + gs,
			want:    edi.Interchange{Sender: "ZZ:ACMESUPPLY", Control: "000000905"},
		},
		{
			name:    "X12 segment terminator is a newline",
			payload: isa("*", "ACMESUPPLY", "000000905", ":", "\n") + "GS*IN\n",
			want:    edi.Interchange{Sender: "ZZ:ACMESUPPLY", Control: "000000905"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ic, err := edi.ParseInterchange([]byte(tt.payload))
			require.NoError(t, err)
			require.Equal(t, tt.want, ic)
		})
	}
}

// TestParseInterchangeRefuses: an envelope that cannot be read without
// guessing is an error, never a key read from the wrong place.
func TestParseInterchangeRefuses(t *testing.T) {
	unpadded := strings.Replace(isa("*", "ACMESUPPLY", "000000905", ">", "~"), "ACMESUPPLY     ", "ACMESUPPLY", 1)
	noISA12 := strings.Replace(isa("*", "ACMESUPPLY", "000000905", ">", "~"), "*00401*", "*", 1)
	for _, tt := range []struct {
		name    string
		payload string
		err     string
	}{
		{"X12 ISA with an element missing", noISA12 + gs, "not fixed-width"},
		{"X12 ISA elements not padded", unpadded + gs, "not fixed-width"},
		{"X12 ISA without its segment terminator", isa("*", "ACMESUPPLY", "000000905", ">", ""), "truncated"},
		{"X12 segment terminator is the element separator", isa("*", "ACMESUPPLY", "000000905", ">", "*") + "GS*IN*", "not three different characters"},
		{"UNA release character is the segment terminator", "UNA:+.' 'UNB+UNOC:3+S+R+1:1+C'UNH+1+INVOIC:D:96A:UN'", "both as segment terminator (UNA6) and as release character (UNA4)"},
		{"UNA component and data element separator alike", "UNA++.? 'UNB+UNOC:3+S+R+1:1+C'", "both as component data element separator (UNA1) and as data element separator (UNA2)"},
		{"UNA data element separator is a space", "UNA: .? 'UNB UNOC:3 ACME R 261202:1530 C1'", "space as data element separator (UNA2)"},
		{"UNB does not use the separator its UNA declares", "UNA:*.? 'UNB+UNOC:3+S+R+1:1+C'", "not the data element separator '*'"},
		{"no UNA and separators other than the defaults", "UNB*UNOA:1*S*R*1:1*C'", "declare the separators in a UNA"},
		{"UNB 0020 with an unreleased component separator", "UNB+UNOA:1+S+R+261202:1530+C:1'", "0020 is a simple data element"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ic, err := edi.ParseInterchange([]byte(tt.payload))
			require.ErrorContains(t, err, tt.err, "parsed %+v", ic)
		})
	}
}

func TestEDIKey(t *testing.T) {
	k, err := edi.Key(message.NewMessage("any-uuid", []byte(x12)))
	require.NoError(t, err)
	require.Equal(t, inbox.Key{Source: "ZZ:ACMESUPPLY", MessageID: "000000905"}, k)
}

// TestEDIKeyDistinct: two interchanges with different control references
// have different keys, or the inbox drops the second as a duplicate.
func TestEDIKeyDistinct(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b string
	}{
		{
			name: "UNA4 space, sender ending in a space",
			a:    "UNA:+.  'UNB+UNOC:3+ACME +BUYER+261202:1530+00001+RREF+INVOIC'UNH+1+INVOIC:D:96A:UN'",
			b:    "UNA:+.  'UNB+UNOC:3+ACME +BUYER+261203:0900+00002+RREF+INVOIC'UNH+1+INVOIC:D:96A:UN'",
		},
		{
			name: "X12 element separator above 0x7f",
			a:    isa("\xa7", "ACMESUPPLY", "000000905", ">", "~"),
			b:    isa("\xa7", "ACMESUPPLY", "000000906", ">", "~"),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ka, err := edi.Key(message.NewMessage("a", []byte(tt.a)))
			require.NoError(t, err)
			kb, err := edi.Key(message.NewMessage("b", []byte(tt.b)))
			require.NoError(t, err)
			require.NotEqual(t, ka, kb)
		})
	}
}

// FuzzParseInterchange: any payload gives an interchange or an error, never
// a panic, and a parsed interchange always has a sender and a control.
func FuzzParseInterchange(f *testing.F) {
	for _, seed := range []string{
		x12, edifact, "UNB+UNOA:1+S+R+1:1+C'", "ISA", "UNA", "UNA:+.? 'UNB+'",
		"UNA:+.  'UNB+UNOC:3+A B+R+1:1+C 1'", "UNB\x1dUNOB\x1f3\x1dS\x1dR\x1d1\x1f1\x1dC\x1c",
		isa("\xa7", "S", "000000001", ">", "~"),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		ic, err := edi.ParseInterchange(payload)
		if err == nil && (ic.Sender == "" || ic.Control == "") {
			t.Fatalf("parsed %q into %+v", payload, ic)
		}
	})
}

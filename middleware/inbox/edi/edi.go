// Package edi reads the envelope of X12 and EDIFACT interchanges, for an
// inbox key that makes a resent interchange a duplicate: the sender and
// the control reference (ISA13, UNB 0020), whatever the message's ID.
//
//	bus.Handle(b, handleInvoice, bus.WithInboxKey(edi.Key))
package edi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/middleware/inbox"
)

// ErrNotInterchange is returned for a payload that starts with neither an
// X12 ISA segment nor an EDIFACT UNB (or UNA) segment.
var ErrNotInterchange = errors.New("edi: payload is not an X12 or EDIFACT interchange")

// Interchange identifies an EDI interchange: its sender and its control
// reference, which the sender never reuses.
type Interchange struct {
	Sender  string // X12 ISA05:ISA06 (qualifier:ID); EDIFACT UNB 0004 (sender identification)
	Control string // X12 ISA13; EDIFACT UNB 0020
}

// ParseInterchange reads the envelope of an X12 or EDIFACT interchange.
func ParseInterchange(payload []byte) (Interchange, error) {
	p := bytes.TrimLeft(payload, " \t\r\n\ufeff")
	switch {
	case bytes.HasPrefix(p, []byte("ISA")):
		return parseX12(p)
	case bytes.HasPrefix(p, []byte("UNA")), bytes.HasPrefix(p, []byte("UNB")):
		return parseEDIFACT(p)
	}
	return Interchange{}, ErrNotInterchange
}

// parseX12 reads the fixed-layout ISA segment: its fourth byte is the
// element separator, and ISA has 16 elements.
func parseX12(p []byte) (Interchange, error) {
	if len(p) < 4 {
		return Interchange{}, errors.New("inbox: X12 ISA segment is truncated")
	}
	sep := string(p[3])
	fields := strings.SplitN(string(p), sep, 17)
	if len(fields) < 17 {
		return Interchange{}, fmt.Errorf("inbox: X12 ISA segment has %d elements, want 16", len(fields)-1)
	}
	sender := strings.TrimSpace(fields[5]) + ":" + strings.TrimSpace(fields[6])
	control := strings.TrimSpace(fields[13])
	if control == "" || strings.TrimSpace(fields[6]) == "" {
		return Interchange{}, errors.New("inbox: X12 ISA06 (sender) or ISA13 (control number) is empty")
	}
	return Interchange{Sender: sender, Control: control}, nil
}

// parseEDIFACT reads UNB, honouring a UNA service string advice.
func parseEDIFACT(p []byte) (Interchange, error) {
	component, element, release, terminator := byte(':'), byte('+'), byte('?'), byte('\'')
	if bytes.HasPrefix(p, []byte("UNA")) {
		if len(p) < 9 {
			return Interchange{}, errors.New("inbox: EDIFACT UNA segment is truncated")
		}
		component, element, release, terminator = p[3], p[4], p[6], p[8]
		p = bytes.TrimLeft(p[9:], " \t\r\n")
	}
	if !bytes.HasPrefix(p, []byte("UNB")) {
		return Interchange{}, errors.New("inbox: EDIFACT interchange has no UNB segment")
	}
	var elements [][]string
	var cur []string
	var b strings.Builder
	for i := 3; i < len(p); i++ {
		c := p[i]
		switch {
		case c == release && i+1 < len(p):
			i++
			b.WriteByte(p[i])
		case c == component:
			cur = append(cur, b.String())
			b.Reset()
		case c == element || c == terminator:
			cur = append(cur, b.String())
			b.Reset()
			elements = append(elements, cur)
			cur = nil
			if c == terminator {
				i = len(p)
			}
		default:
			b.WriteByte(c)
		}
	}
	// elements[0] is empty (the separator after "UNB"); then S001 syntax,
	// S002 sender, S003 recipient, S004 date/time, 0020 control reference.
	if len(elements) < 6 || len(elements[2]) == 0 || elements[2][0] == "" || len(elements[5]) == 0 || elements[5][0] == "" {
		return Interchange{}, errors.New("inbox: EDIFACT UNB lacks the sender (S002) or the control reference (0020)")
	}
	return Interchange{Sender: elements[2][0], Control: elements[5][0]}, nil
}

// Key is an inbox.KeyFunc for EDI interchanges in the payload: the source
// is the interchange sender and the message ID its control reference, so a
// resent interchange is a duplicate whatever its message ID.
func Key(msg *message.Message) (inbox.Key, error) {
	ic, err := ParseInterchange(msg.Payload)
	if err != nil {
		return inbox.Key{}, err
	}
	return inbox.Key{Source: ic.Sender, MessageID: ic.Control}, nil
}

var _ inbox.KeyFunc = Key

// Package edi reads the envelope of X12 and EDIFACT interchanges, for an
// inbox key that makes a resent interchange a duplicate: the sender and
// the control reference, whatever the message's ID.
//
//	bus.Handle(b, handleInvoice, bus.WithInbox(bus.Inbox{Key: edi.Key}))
//
// # The key
//
// For X12 the source is ISA05:ISA06 (the sender's qualifier and ID, padding
// trimmed) and the message ID is ISA13. For EDIFACT the source is UNB S002
// 0004 (the sender identification, without its qualifier 0007) and the
// message ID is UNB 0020. Nothing else is in the key: not the receiver (X12
// ISA07:ISA08, EDIFACT S003), not the test indicator (ISA15, UNB 0035).
//
// # Envelopes
//
// ISA is fixed-width: its fourth byte is the element separator, ISA16 (byte
// 104) the component separator and byte 105 the segment terminator; an ISA
// whose elements are not padded to their full width is refused. EDIFACT
// takes its service characters from a UNA service string advice; a space
// as UNA4 means there is no release character, and UNA5 (reserved, the
// repetition separator in syntax version 4) is not used in UNB. Without a
// UNA, UNB uses the level A defaults (:+.? ') or, when its first separator
// is IS3 (0x1D), the level B ones (IS1, IS3, IS4, no release character).
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

// isaLength is the length of the fixed-width ISA segment with its
// terminator; isaSeparators are the offsets of its 16 element separators.
const isaLength = 106

var isaSeparators = [16]int{3, 6, 17, 20, 31, 34, 50, 53, 69, 76, 81, 83, 89, 99, 101, 103}

// parseX12 reads the fixed-width ISA segment.
func parseX12(p []byte) (Interchange, error) {
	if len(p) < isaLength {
		return Interchange{}, fmt.Errorf("edi: X12 ISA segment is truncated: %d bytes, want %d (ISA is fixed-width and ends with its segment terminator)", len(p), isaLength)
	}
	element, component, terminator := p[3], p[104], p[105]
	for _, at := range isaSeparators {
		if p[at] != element {
			return Interchange{}, fmt.Errorf("edi: X12 ISA is not fixed-width: byte %d is %q, not the element separator %q: pad every ISA element to its full width", at, p[at], element)
		}
	}
	if component == element || terminator == element || terminator == component {
		return Interchange{}, fmt.Errorf("edi: X12 ISA element separator %q, component separator (ISA16) %q and segment terminator %q are not three different characters", element, component, terminator)
	}
	isa := func(n int) string { // ISA01 to ISA15
		return strings.TrimSpace(string(p[isaSeparators[n-1]+1 : isaSeparators[n]]))
	}
	qualifier, sender, control := isa(5), isa(6), isa(13)
	if sender == "" || control == "" {
		return Interchange{}, errors.New("edi: X12 ISA06 (sender) or ISA13 (control number) is empty")
	}
	return Interchange{Sender: qualifier + ":" + sender, Control: control}, nil
}

// serviceChars are the EDIFACT characters that structure UNB.
type serviceChars struct {
	component, element, terminator byte
	release                        byte
	hasRelease                     bool
}

var (
	levelA = serviceChars{component: ':', element: '+', terminator: '\'', release: '?', hasRelease: true}
	levelB = serviceChars{component: 0x1f, element: 0x1d, terminator: 0x1c} // IS1, IS3, IS4
)

// parseUNA reads a service string advice: UNA1 component and UNA2 element
// separators, UNA4 release character (a space: none), UNA6 terminator.
func parseUNA(una []byte) (serviceChars, error) {
	sc := serviceChars{component: una[3], element: una[4], terminator: una[8], release: una[6], hasRelease: una[6] != ' '}
	type role struct {
		c    byte
		name string
	}
	roles := []role{
		{sc.component, "component data element separator (UNA1)"},
		{sc.element, "data element separator (UNA2)"},
		{sc.terminator, "segment terminator (UNA6)"},
	}
	for _, r := range roles {
		if r.c == ' ' {
			return serviceChars{}, fmt.Errorf("edi: EDIFACT UNA has a space as %s: only the release character (UNA4) may be a space, meaning none", r.name)
		}
	}
	if sc.hasRelease {
		roles = append(roles, role{sc.release, "release character (UNA4)"})
	}
	for i, a := range roles {
		for _, b := range roles[i+1:] {
			if a.c == b.c {
				return serviceChars{}, fmt.Errorf("edi: EDIFACT UNA uses %q both as %s and as %s", a.c, a.name, b.name)
			}
		}
	}
	return sc, nil
}

// parseEDIFACT reads UNB, with the service characters of a UNA service
// string advice or else the defaults of syntax level A or B.
func parseEDIFACT(p []byte) (Interchange, error) {
	sc := levelA
	una := bytes.HasPrefix(p, []byte("UNA"))
	if una {
		if len(p) < 9 {
			return Interchange{}, errors.New("edi: EDIFACT UNA segment is truncated: UNA is followed by six service characters")
		}
		var err error
		if sc, err = parseUNA(p[:9]); err != nil {
			return Interchange{}, err
		}
		p = bytes.TrimLeft(p[9:], " \t\r\n")
	}
	if !bytes.HasPrefix(p, []byte("UNB")) || len(p) < 4 {
		return Interchange{}, errors.New("edi: EDIFACT interchange has no UNB segment")
	}
	switch {
	case una:
		if p[3] != sc.element {
			return Interchange{}, fmt.Errorf("edi: EDIFACT UNB starts with %q, not the data element separator %q that its UNA declares", p[3], sc.element)
		}
	case p[3] == levelB.element:
		sc = levelB
	case p[3] != levelA.element:
		return Interchange{}, fmt.Errorf("edi: EDIFACT UNB starts with %q, neither the level A data element separator '+' nor the level B one (IS3, 0x1d): declare the separators in a UNA service string advice", p[3])
	}
	var elements [][]string
	var cur []string
	var b strings.Builder
	for i := 3; i < len(p); i++ {
		c := p[i]
		switch {
		case sc.hasRelease && c == sc.release && i+1 < len(p):
			i++
			b.WriteByte(p[i])
		case c == sc.component:
			cur = append(cur, b.String())
			b.Reset()
		case c == sc.element || c == sc.terminator:
			cur = append(cur, b.String())
			b.Reset()
			elements = append(elements, cur)
			cur = nil
			if c == sc.terminator {
				i = len(p)
			}
		default:
			b.WriteByte(c)
		}
	}
	// elements[0] is empty (the separator after "UNB"); then S001 syntax,
	// S002 sender, S003 recipient, S004 date/time, 0020 control reference.
	if len(elements) < 6 || elements[2][0] == "" || elements[5][0] == "" {
		return Interchange{}, errors.New("edi: EDIFACT UNB lacks the sender (S002) or the control reference (0020)")
	}
	if len(elements[5]) > 1 {
		return Interchange{}, fmt.Errorf("edi: EDIFACT UNB control reference (0020) %q has components, but 0020 is a simple data element: the sender must release the component separator %q in it", strings.Join(elements[5], string(sc.component)), sc.component)
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

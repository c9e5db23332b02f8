package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// printList prints list as JSON for scripts ([] when empty), or as a table:
// the header's columns, then a row per item with the columns row returns.
func printList[T any](out io.Writer, asJSON bool, list []T, header []string, row func(T) []string) error {
	if asJSON {
		if list == nil {
			list = []T{}
		}
		return json.NewEncoder(out).Encode(list)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, item := range list {
		cells := row(item)
		for i, c := range cells {
			cells[i] = printable(c)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}

// printable is s for a terminal: itself if valid printable UTF-8, else
// Go-quoted, since producers' IDs and reasons could hold escape sequences,
// newlines or tabwriter's 0xff.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// idOrNone is a message ID to print: printable, or "(no ID)" for a
// message without one.
func idOrNone(id string) string {
	if id == "" {
		return "(no ID)"
	}
	return printable(id)
}

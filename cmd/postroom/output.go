package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
		fmt.Fprintln(w, strings.Join(row(item), "\t"))
	}
	return w.Flush()
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

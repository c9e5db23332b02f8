// Package endpointname checks the names of endpoints, for the bus and the
// postroom command.
package endpointname

import (
	"fmt"
	"regexp"
)

var name = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$`)

// Valid reports whether s can name an endpoint: 1 to 40 letters, digits,
// '-', '_' or '.', starting with a letter or digit.
func Valid(s string) bool { return name.MatchString(s) }

// Check returns an error unless s can name an endpoint (see [Valid]).
func Check(s string) error {
	if !Valid(s) {
		return fmt.Errorf("bus: endpoint %q: use 1 to 40 letters, digits, '-', '_' or '.', starting with a letter or digit", s)
	}
	return nil
}

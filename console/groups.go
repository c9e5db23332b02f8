package console

import (
	"cmp"
	"regexp"
	"slices"
)

// failureGroup is the failed messages of one handler of one endpoint
// group (metadata.ErrorGroup) whose reasons have one shape.
type failureGroup struct {
	Handler  string
	Group    string // the failing handler's subscriber group; "" for a message no bus moved
	Reason   string // the shape: reasonShape of each message's reason
	Messages []failedMessage
}

func groupFailed(list []failedMessage) []failureGroup {
	var groups []failureGroup
	for _, f := range list {
		shape := reasonShape(f.Reason)
		i := slices.IndexFunc(groups, func(g failureGroup) bool {
			return g.Handler == f.Handler && g.Group == f.Group && g.Reason == shape
		})
		if i < 0 {
			groups = append(groups, failureGroup{Handler: f.Handler, Group: f.Group, Reason: shape})
			i = len(groups) - 1
		}
		groups[i].Messages = append(groups[i].Messages, f)
	}
	slices.SortStableFunc(groups, func(a, b failureGroup) int { return cmp.Compare(len(b.Messages), len(a.Messages)) })
	return groups
}

// What varies from one message to the next in an error's text: UUIDs,
// other hexadecimal IDs of 8 or more characters with a digit, and numbers
// standing alone ("order-42", "1.5 s"; not the 64 of "int64"), except a
// number after status, code, error, errno, SQLSTATE or HTTP ("status 503"
// and "status 400" are failures of different kinds).
var (
	uuidPattern   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexIDPattern  = regexp.MustCompile(`(?i)\b[0-9a-f]*[0-9][0-9a-f]*\b`)
	numberPattern = regexp.MustCompile(`(?i)(?:\b(?:status|code|error|errno|sqlstate|http)\W{0,2})?\b[0-9]+(?:[.,][0-9]+)*\b`)
)

// reasonShape is a reason with what varies per message written as "…"
// ("customer … has no VAT number"); line breaks count as LF (see asPosted).
func reasonShape(reason string) string {
	s := asPosted(reason)
	s = uuidPattern.ReplaceAllString(s, "…")
	s = hexIDPattern.ReplaceAllStringFunc(s, func(m string) string {
		if len(m) >= 8 {
			return "…"
		}
		return m
	})
	return numberPattern.ReplaceAllStringFunc(s, func(m string) string {
		if m[0] < '0' || m[0] > '9' { // after status, error…: a code tells failures apart
			return m
		}
		return "…"
	})
}

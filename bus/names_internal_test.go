package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

// topicOfByRegexp is topicOf as it was before its fast path: the reference
// the topics foreign producers compute were defined by.
func topicOfByRegexp(name string) string {
	t := strings.Trim(notTopicish.ReplaceAllString(name, "-"), "-")
	if len(t) <= maxTopicLength && t == name {
		return t
	}
	sum := sha256.Sum256([]byte(name))
	head := t[max(0, len(t)-(maxTopicLength-9)):]
	return strings.TrimLeft(head, "-.") + "-" + hex.EncodeToString(sum[:4])
}

// TestTopicOfKeepsItsNames: the fast path for names that are topics
// already gives every name the topic it had, so producers that computed a
// topic keep reaching it.
func TestTopicOfKeepsItsNames(t *testing.T) {
	names := []string{"", "-", "a", "conf.Cmd", "-a", "a-", "a--b", ".a", "a.", "_a_",
		strings.Repeat("x", maxTopicLength), strings.Repeat("x", maxTopicLength+1),
		"billing.cmd.github.com/acme/billing/events.InvoiceCreated", "ünïcode", "a b", "a\x00b"}
	const alphabet = "ab.-_/ Zé9"
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range r.IntN(50) {
			b.WriteString(string([]rune(alphabet)[r.IntN(len([]rune(alphabet)))]))
		}
		names = append(names, b.String())
	}
	for _, name := range names {
		if got, want := topicOf(name), topicOfByRegexp(name); got != want {
			t.Fatalf("topicOf(%q) = %q, want %q", name, got, want)
		}
	}
}

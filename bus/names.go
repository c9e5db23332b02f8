package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"regexp"
	"strings"
)

// namer is implemented by a message type that declares its stable name,
// which survives moving or renaming the Go type.
type namer interface {
	MessageName() string
}

// MessageName returns the stable name of T: its MessageName method if it
// has one, else its import path and type name
// ("github.com/acme/billing/events.InvoiceCreated").
func MessageName[T any]() string {
	var zero T
	if n, ok := any(zero).(namer); ok {
		return n.MessageName()
	}
	if n, ok := any(&zero).(namer); ok {
		return n.MessageName()
	}
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

var (
	topicName   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	notTopicish = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
)

// maxTopicLength keeps a topic short enough for every transport's names
// (watermill-sql prefixes tables with "watermill_offsets_"; PostgreSQL cuts
// identifiers at 63 bytes).
const maxTopicLength = 40

// topicOf turns a name into a topic every transport accepts (letters,
// digits, '-', '_' and '.', at most 40 bytes); a name that had to change
// keeps its tail and ends in a hash of the whole, so names stay distinct.
func topicOf(name string) string {
	if len(name) <= maxTopicLength && isTopic(name) {
		return name // the common case, without a regexp on every Send
	}
	t := strings.Trim(notTopicish.ReplaceAllString(name, "-"), "-")
	if len(t) <= maxTopicLength && t == name {
		return t
	}
	sum := sha256.Sum256([]byte(name))
	head := t[max(0, len(t)-(maxTopicLength-9)):]
	return strings.TrimLeft(head, "-.") + "-" + hex.EncodeToString(sum[:4])
}

// isTopic reports whether topicOf would keep name as it is.
func isTopic(name string) bool {
	if name == "" || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// EventTopic returns the topic events of the message name (MessageName[T]()
// for a Go type T) are published to, for a producer in another language:
// the name made into a valid topic, not always the name itself.
func EventTopic(messageName string) string { return eventTopic(messageName) }

// CommandTopic returns the topic of endpoint's commands of the message name.
func CommandTopic(endpoint, messageName string) string { return commandTopic(endpoint, messageName) }

// GroupOf returns the subscriber group of a handler of endpoint (on
// RabbitMQ, see amqp.QueueName). handler is the handler's name: bus.Named's,
// else its message's name.
func GroupOf(endpoint, handler string) string { return topicOf(endpoint + "." + handler) }

// eventTopic is where events of a type are published.
func eventTopic(messageName string) string { return topicOf(messageName) }

// commandTopic is where commands of a type are sent to an endpoint.
func commandTopic(endpoint, messageName string) string {
	return topicOf(endpoint + ".cmd." + messageName)
}

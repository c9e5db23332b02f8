package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// failedMessage is one message of the error topic.
type failedMessage struct {
	ID, Handler, Topic, Attempts, At, Reason string
	Key                                      string      // copyKey: what an action names a copy without an ID by
	Group                                    string      // the failing handler's group
	FailedAt                                 time.Time   // At, parsed; zero if it is not a time
	Metadata                                 [][2]string // sorted by key
	Payload                                  string
}

func failedOf(msg *message.Message, full bool) failedMessage {
	f := failedMessage{
		ID: msg.UUID, Handler: msg.Metadata.Get(metadata.ErrorHandler), Topic: msg.Metadata.Get(metadata.ErrorTopic),
		Attempts: msg.Metadata.Get(metadata.ErrorAttempts), At: msg.Metadata.Get(metadata.ErrorAt),
		Reason: reasonOf(msg), Group: msg.Metadata.Get(metadata.ErrorGroup), Key: copyKey(msg),
	}
	if at, err := time.Parse(time.RFC3339Nano, f.At); err == nil {
		f.FailedAt = at
		f.At = at.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if full {
		for k, v := range msg.Metadata {
			f.Metadata = append(f.Metadata, [2]string{k, v})
		}
		slices.SortFunc(f.Metadata, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		switch {
		case !utf8.Valid(msg.Payload):
			f.Payload = fmt.Sprintf("(%d bytes, not UTF-8)", len(msg.Payload))
		case json.Valid(msg.Payload):
			var buf bytes.Buffer
			_ = json.Indent(&buf, msg.Payload, "", "  ")
			f.Payload = buf.String()
		default:
			f.Payload = string(msg.Payload)
		}
	}
	return f
}

// reasonOf is the reason a failed message is grouped and selected by (both
// must use it): the bus's error reason or, for a message no bus moved, the
// transport's problem with it.
func reasonOf(msg *message.Message) string {
	return cmp.Or(msg.Metadata.Get(metadata.ErrorReason), msg.Metadata.Get(metadata.TransportError))
}

// errNoErrorTopic is the error of the failed-messages pages without an
// error topic to read.
var errNoErrorTopic = errors.New("the console cannot read the error topic: start it with --amqp (RabbitMQ), " +
	"or give it the database of the SQL transport (--dsn)")

// failedSource says where the console reads the error topic: "amqp", "sql"
// or "" (nowhere; asked again at the next page, for a bus started later).
func (c *Console) failedSource(ctx context.Context) string {
	if c.cfg.AMQPURL != "" {
		return "amqp"
	}
	if c.sqlErrors.Load() {
		return "sql"
	}
	if _, err := openSQLErrors(ctx, c.cfg.DB, c.cfg.ErrorTopic, dialect.DelayedTableDefault, c.now); err == nil {
		c.sqlErrors.Store(true)
		return "sql"
	}
	return ""
}

// withQueue opens the error topic, runs fn and closes it (errors go
// through redact). One page at a time: a browse holds what it read, which
// another browse meanwhile would not see.
func (c *Console) withQueue(ctx context.Context, fn func(q errorQueue) error) error {
	source := c.failedSource(ctx)
	c.queueMu.Lock()
	defer c.queueMu.Unlock()
	switch source {
	case "amqp":
		q, err := amqpqueue.Open(c.cfg.AMQPURL, c.cfg.ErrorTopic, transport.ErrorQueueGroup)
		if err != nil {
			return err
		}
		defer q.Close()
		return fn(q)
	case "sql":
		q, err := openSQLErrors(ctx, c.cfg.DB, c.cfg.ErrorTopic, dialect.DelayedTableDefault, c.now)
		if err != nil {
			return err
		}
		return fn(q)
	}
	return errNoErrorTopic
}

// browse returns the failed messages, oldest first, and the error queue's
// delivery-limit warning, or "".
func (c *Console) browse(ctx context.Context, full bool) ([]failedMessage, string, error) {
	var list []failedMessage
	warning := ""
	err := c.withQueue(ctx, func(q errorQueue) error {
		warning = q.DeliveryLimitWarning()
		return q.Browse(ctx, c.cfg.Limit, func(msg *message.Message) (bool, error) {
			list = append(list, failedOf(msg, full))
			return false, nil
		})
	})
	return list, warning, err
}

func (c *Console) failedList(w http.ResponseWriter, r *http.Request) {
	list, warning, err := c.browse(r.Context(), false)
	p := page{Title: "Failed messages", Data: map[string]any{"Groups": groupFailed(list), "Total": len(list), "Limit": c.cfg.Limit,
		"ErrorTopic": c.cfg.ErrorTopic, "Source": c.failedSource(r.Context()), "Warning": warning}}
	if err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "failed", p)
}

func (c *Console) failedShow(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("id")
	group, byGroup := q.Get("group"), q.Has("group")
	list, _, err := c.browse(r.Context(), true)
	var copies []failedMessage
	others := 0 // copies with the ID in another group than the one asked for
	for _, f := range list {
		switch {
		case f.ID != id:
		case byGroup && f.Group != group:
			others++
		default:
			copies = append(copies, f)
		}
	}
	var groups []string // of the copies shown, in their order
	for _, f := range copies {
		if !slices.Contains(groups, f.Group) {
			groups = append(groups, f.Group)
		}
	}
	p := page{Title: "Failed message " + id, Data: map[string]any{"ID": id, "Copies": copies, "Groups": groups, "Others": others}}
	switch {
	case err != nil:
		p.Error = c.redact(err)
	case len(copies) == 0 && others > 0:
		p.Error = fmt.Sprintf("no copy of message %s %s in the first %d of the error topic %s, but %d of other endpoint groups: retried or deleted since?",
			id, groupText(group), c.cfg.Limit, c.cfg.ErrorTopic, others)
	case len(copies) == 0:
		p.Error = fmt.Sprintf("no message %s in the first %d of the error topic %s: retried or deleted since?", id, c.cfg.Limit, c.cfg.ErrorTopic)
	}
	c.renderPage(w, r, "message", p)
}

// groupText names an endpoint group (metadata.ErrorGroup) in a sentence.
func groupText(group string) string {
	if group == "" {
		return "without an endpoint group (not moved there by a bus)"
	}
	return "of endpoint group " + group
}

// selection is which failed messages an action applies to: by ID, by
// digest (copyKey, for a message without an ID), by failure group, or all;
// with ByGroup, only those of endpoint group Group, which tells apart the
// copies of one event two endpoints failed. Without a group, every copy.
type selection struct {
	ID, Copy, Handler, Reason, Group string
	ByGroup                          bool // the request named a group, maybe ""
	All                              bool
}

func selectionOf(r *http.Request) (selection, error) {
	s := selection{ID: asPosted(r.FormValue("id")), Copy: r.FormValue("copy"), Handler: asPosted(r.FormValue("handler")),
		Reason: asPosted(r.FormValue("reason")), Group: asPosted(r.FormValue("group")), All: r.FormValue("all") == "1"}
	_, s.ByGroup = r.Form["group"] // parsed by FormValue: the query and the posted form
	if s.ID == "" && s.Copy == "" && !s.All && s.Handler == "" && s.Reason == "" {
		return s, errors.New("choose a message, a failure group or all")
	}
	return s, nil
}

func (s selection) match(msg *message.Message) bool {
	if s.ByGroup && asPosted(msg.Metadata.Get(metadata.ErrorGroup)) != s.Group {
		return false
	}
	switch {
	case s.All:
		return true
	case s.ID != "":
		return asPosted(msg.UUID) == s.ID
	case s.Copy != "":
		return copyKey(msg) == s.Copy
	default:
		if asPosted(msg.Metadata.Get(metadata.ErrorHandler)) != s.Handler {
			return false
		}
		if reasonShape(s.Reason) != s.Reason { // an exact reason (a script, a page served before an upgrade): that reason alone
			return asPosted(reasonOf(msg)) == s.Reason
		}
		return reasonShape(reasonOf(msg)) == s.Reason
	}
}

// asPosted is s as a browser posts it back from a form: line breaks as LF
// (browsers submit CRLF), NUL and invalid UTF-8 as U+FFFD, a run of U+FFFD
// as one. Otherwise a multi-line reason comes back unequal to itself and
// its group's Retry and Delete find nothing.
func asPosted(s string) string {
	if !strings.ContainsAny(s, "\r\x00\uFFFD") && utf8.ValidString(s) {
		return s
	}
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	var b strings.Builder
	bad := false
	for _, r := range strings.ReplaceAll(s, "\x00", "\uFFFD") { // invalid bytes range as U+FFFD
		if r == utf8.RuneError {
			if !bad {
				b.WriteRune(r)
			}
			bad = true
			continue
		}
		bad = false
		b.WriteRune(r)
	}
	return b.String()
}

func (s selection) String() string {
	group := ""
	if s.ByGroup {
		group = " " + groupText(s.Group)
	}
	switch {
	case s.All:
		return "every failed message" + group
	case s.ID != "":
		return "message " + s.ID + group
	case s.Copy != "":
		return "the message without an ID (" + s.Copy + ")" + group
	default:
		return fmt.Sprintf("the messages of %s%s that failed like %q", cmp.Or(s.Handler, "(no handler)"), group, reasonShape(s.Reason))
	}
}

// copyKey identifies one copy in the error topic as the confirmation page
// showed it: a digest of its ID, body and metadata, without the delivery
// count and redelivered mark, which each read changes. Copies with one key
// are counted, and an action takes as many as were counted.
func copyKey(msg *message.Message) string {
	h := sha256.New()
	field := func(s string) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	field(msg.UUID)
	field(string(msg.Payload))
	for _, k := range slices.Sorted(maps.Keys(msg.Metadata)) {
		if k != metadata.DeliveryCount && k != metadata.Redelivered {
			field(k)
			field(msg.Metadata[k])
		}
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}

// confirmedOf returns the copies the confirmation page showed (the form's
// "copies": their keys, comma-separated), and how many of each.
func confirmedOf(r *http.Request) (map[string]int, int, error) {
	keys := strings.Split(r.FormValue("copies"), ",")
	confirmed := make(map[string]int, len(keys))
	n := 0
	for _, k := range keys {
		if k = strings.TrimSpace(k); k != "" {
			confirmed[k]++
			n++
		}
	}
	if n == 0 {
		return nil, 0, errors.New("the form names no failed message to take: open the confirmation page again " +
			"(Retry or Delete on the failed messages page); an action takes only the messages its confirmation showed")
	}
	return confirmed, n, nil
}

func (c *Console) failedConfirm(w http.ResponseWriter, r *http.Request) {
	s, err := selectionOf(r)
	action := r.FormValue("action")
	if err == nil && action != "retry" && action != "delete" {
		err = errors.New("the action is retry or delete")
	}
	var keys []string
	if err == nil {
		err = c.withQueue(r.Context(), func(q errorQueue) error {
			return q.Browse(r.Context(), c.cfg.Limit, func(msg *message.Message) (bool, error) {
				if s.match(msg) {
					keys = append(keys, copyKey(msg))
				}
				return false, nil
			})
		})
	}
	if err == nil && len(keys) == 0 {
		err = fmt.Errorf("nothing to %s: the first %d of the error topic %s hold none of %s (retried or deleted since?)",
			action, c.cfg.Limit, c.cfg.ErrorTopic, s)
	}
	p := page{Title: "Confirm", Data: map[string]any{"Action": action, "Sel": s, "Count": len(keys),
		"Copies": strings.Join(keys, ","), "Source": c.failedSource(r.Context())}}
	if err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "confirm_failed", p)
}

func (c *Console) failedRetry(w http.ResponseWriter, r *http.Request) {
	c.takeFailed(w, r, "retried", func(q errorQueue, msg *message.Message) error {
		_, err := q.Replay(r.Context(), msg)
		return err
	})
}

func (c *Console) failedDelete(w http.ResponseWriter, r *http.Request) {
	c.takeFailed(w, r, "deleted", func(errorQueue, *message.Message) error { return nil })
}

// takeFailed runs do on each selected message the confirmation page showed
// and removes it from the error topic once do succeeded; one the operator
// has not seen (failed since) stays.
func (c *Console) takeFailed(w http.ResponseWriter, r *http.Request, done string, do func(q errorQueue, msg *message.Message) error) {
	s, err := selectionOf(r)
	var confirmed map[string]int
	var want int
	if err == nil {
		confirmed, want, err = confirmedOf(r)
	}
	if err != nil {
		http.Error(w, c.redact(err), http.StatusBadRequest)
		return
	}
	n, unconfirmed, kept := 0, 0, 0
	var keptErr error // why the last message kept could not be taken
	var at string     // the message do was at
	atOnce := false   // each message leaves the error topic as it is taken (RabbitMQ)
	err = c.withQueue(r.Context(), func(q errorQueue) error {
		_, atOnce = q.(*amqpqueue.Queue)
		return q.Browse(r.Context(), c.cfg.Limit, func(msg *message.Message) (bool, error) {
			if !s.match(msg) {
				return false, nil
			}
			key := copyKey(msg)
			if confirmed[key] == 0 {
				unconfirmed++
				return false, nil
			}
			at = msg.UUID
			if err := do(q, msg); errors.Is(err, amqpqueue.ErrNotReplayable) {
				kept, keptErr = kept+1, err // it stays; the others go on
				return false, nil
			} else if err != nil {
				return false, err
			}
			confirmed[key]--
			n++
			return true, nil
		})
	})
	switch {
	case err != nil && (n > 0 || errors.Is(err, amqpqueue.ErrOutcomeUnknown)):
		err = errors.New(stoppedText(done, n, at, atOnce, err))
	case err == nil && n == 0 && kept > 0:
		err = fmt.Errorf("nothing %s: %d message(s) of %s cannot be, and stay in the error topic: %w", done, kept, s, keptErr)
	case err == nil && n == 0:
		err = fmt.Errorf("nothing to do: the %d message(s) of %s that the confirmation showed are not in the first %d of the error topic %s "+
			"(retried or deleted since?)", want, s, c.cfg.Limit, c.cfg.ErrorTopic)
		if unconfirmed > 0 {
			err = fmt.Errorf("%w; %d not shown on the confirmation page stay in the error topic: open it again to take them", err, unconfirmed)
		}
	}
	if err != nil {
		c.log.Warn("console: "+done+" failed", "selection", s.String(), "messages", n, "err", c.redact(err))
		w.WriteHeader(http.StatusConflict)
		c.renderPage(w, r, "confirm_failed", page{Title: "Failed", Error: c.redact(err), Data: map[string]any{"Sel": s}})
		return
	}
	subject := fmt.Sprintf("%s (%d", s, n)
	if kept > 0 {
		subject += fmt.Sprintf("; %d cannot be %s and stay in the error topic: %s", kept, done, c.redact(keptErr))
	}
	if gone := want - n - kept; gone > 0 {
		subject += fmt.Sprintf(" of the %d confirmed; %d gone since", want, gone)
	}
	if unconfirmed > 0 {
		subject += fmt.Sprintf("; %d not shown on the confirmation page left in the error topic", unconfirmed)
	}
	subject += ")"
	c.log.Info("console: "+done, "selection", s.String(), "messages", n, "confirmed", want, "unconfirmed_left", unconfirmed)
	redirectDone(w, r, "/failed", done, subject)
}

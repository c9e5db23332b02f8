package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/metadata"
)

// failedMessage is one message of the error topic.
type failedMessage struct {
	ID, Handler, Topic, Attempts, At, Reason string
	Group                                    string      // the failing handler's group
	FailedAt                                 time.Time   // At, parsed; zero if it is not a time
	Metadata                                 [][2]string // sorted by key
	Payload                                  string
}

// failureGroup is the failed messages of one handler with one reason
// (ServicePulse's failure group).
type failureGroup struct {
	Handler, Reason string
	Messages        []failedMessage
}

func failedOf(msg *message.Message, full bool) failedMessage {
	f := failedMessage{
		ID: msg.UUID, Handler: msg.Metadata.Get(metadata.ErrorHandler), Topic: msg.Metadata.Get(metadata.ErrorTopic),
		Attempts: msg.Metadata.Get(metadata.ErrorAttempts), At: msg.Metadata.Get(metadata.ErrorAt),
		Reason: msg.Metadata.Get(metadata.ErrorReason), Group: msg.Metadata.Get(metadata.ErrorGroup),
	}
	if f.Reason == "" && msg.Metadata.Get(metadata.TransportError) != "" {
		f.Reason = msg.Metadata.Get(metadata.TransportError) // a row the console could not read
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

// errNoErrorTopic is the error of the failed-messages pages without an
// error topic to read.
var errNoErrorTopic = errors.New("the console cannot read the error topic: start it with --amqp (RabbitMQ), " +
	"or give it the database of the SQL transport (--dsn)")

// failedSource says where the console reads the error topic: "amqp",
// "sql" (its table is in the console's database) or "" (nowhere). A
// database whose table is found is remembered; one without is asked
// again at the next page, so that a bus started later is seen.
func (c *Console) failedSource(ctx context.Context) string {
	if c.cfg.AMQPURL != "" {
		return "amqp"
	}
	if c.sqlErrors.Load() {
		return "sql"
	}
	if _, err := openSQLErrors(ctx, c.cfg.DB, c.cfg.ErrorTopic, c.tables.Delayed, c.now); err == nil {
		c.sqlErrors.Store(true)
		return "sql"
	}
	return ""
}

// withQueue opens the error topic, runs fn and closes it. Its errors go
// through redact before anyone sees them. One page at a time reads it: a
// browse holds the messages it has read until it ends, and another browse
// meanwhile would not see them.
func (c *Console) withQueue(ctx context.Context, fn func(q errorQueue) error) error {
	source := c.failedSource(ctx)
	c.queueMu.Lock()
	defer c.queueMu.Unlock()
	switch source {
	case "amqp":
		q, err := amqpqueue.Open(c.cfg.AMQPURL, c.cfg.ErrorTopic, bus.ErrorQueueGroup)
		if err != nil {
			return err
		}
		defer q.Close()
		return fn(q)
	case "sql":
		q, err := openSQLErrors(ctx, c.cfg.DB, c.cfg.ErrorTopic, c.tables.Delayed, c.now)
		if err != nil {
			return err
		}
		return fn(q)
	}
	return errNoErrorTopic
}

// browse returns the failed messages, oldest first.
func (c *Console) browse(ctx context.Context, full bool) ([]failedMessage, error) {
	var list []failedMessage
	err := c.withQueue(ctx, func(q errorQueue) error {
		return q.Browse(ctx, c.cfg.Limit, func(msg *message.Message) (bool, error) {
			list = append(list, failedOf(msg, full))
			return false, nil
		})
	})
	return list, err
}

func groupFailed(list []failedMessage) []failureGroup {
	var groups []failureGroup
	for _, f := range list {
		i := slices.IndexFunc(groups, func(g failureGroup) bool { return g.Handler == f.Handler && g.Reason == f.Reason })
		if i < 0 {
			groups = append(groups, failureGroup{Handler: f.Handler, Reason: f.Reason})
			i = len(groups) - 1
		}
		groups[i].Messages = append(groups[i].Messages, f)
	}
	slices.SortStableFunc(groups, func(a, b failureGroup) int { return cmp.Compare(len(b.Messages), len(a.Messages)) })
	return groups
}

func (c *Console) failedList(w http.ResponseWriter, r *http.Request) {
	list, err := c.browse(r.Context(), false)
	p := page{Title: "Failed messages", Data: map[string]any{"Groups": groupFailed(list), "Total": len(list), "Limit": c.cfg.Limit,
		"ErrorTopic": c.cfg.ErrorTopic, "Source": c.failedSource(r.Context())}}
	if err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "failed", p)
}

func (c *Console) failedShow(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	list, err := c.browse(r.Context(), true)
	var copies []failedMessage
	for _, f := range list {
		if f.ID == id {
			copies = append(copies, f)
		}
	}
	p := page{Title: "Failed message " + id, Data: map[string]any{"ID": id, "Copies": copies}}
	if err != nil {
		p.Error = c.redact(err)
	} else if len(copies) == 0 {
		p.Error = fmt.Sprintf("no message %s in the first %d of the error topic %s: retried or deleted since?", id, c.cfg.Limit, c.cfg.ErrorTopic)
	}
	c.renderPage(w, r, "message", p)
}

// selection is which failed messages an action applies to: those with an
// ID, those of a failure group, or all.
type selection struct {
	ID, Handler, Reason string
	All                 bool
}

func selectionOf(r *http.Request) (selection, error) {
	s := selection{ID: r.FormValue("id"), Handler: r.FormValue("handler"), Reason: r.FormValue("reason"), All: r.FormValue("all") == "1"}
	if s.ID == "" && !s.All && s.Handler == "" && s.Reason == "" {
		return s, errors.New("choose a message, a failure group or all")
	}
	return s, nil
}

func (s selection) match(msg *message.Message) bool {
	switch {
	case s.All:
		return true
	case s.ID != "":
		return msg.UUID == s.ID
	default:
		return msg.Metadata.Get(metadata.ErrorHandler) == s.Handler && msg.Metadata.Get(metadata.ErrorReason) == s.Reason
	}
}

func (s selection) String() string {
	switch {
	case s.All:
		return "every failed message"
	case s.ID != "":
		return "message " + s.ID
	default:
		return fmt.Sprintf("the messages of %s failed with %q", cmp.Or(s.Handler, "(no handler)"), s.Reason)
	}
}

func (c *Console) failedConfirm(w http.ResponseWriter, r *http.Request) {
	s, err := selectionOf(r)
	action := r.FormValue("action")
	if err == nil && action != "retry" && action != "delete" {
		err = errors.New("the action is retry or delete")
	}
	var n int
	if err == nil {
		err = c.withQueue(r.Context(), func(q errorQueue) error {
			return q.Browse(r.Context(), c.cfg.Limit, func(msg *message.Message) (bool, error) {
				if s.match(msg) {
					n++
				}
				return false, nil
			})
		})
	}
	p := page{Title: "Confirm", Data: map[string]any{"Action": action, "Sel": s, "Count": n, "Source": c.failedSource(r.Context())}}
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

// takeFailed runs do on each selected message and removes it from the
// error topic once do succeeded.
func (c *Console) takeFailed(w http.ResponseWriter, r *http.Request, done string, do func(q errorQueue, msg *message.Message) error) {
	s, err := selectionOf(r)
	if err != nil {
		http.Error(w, c.redact(err), http.StatusBadRequest)
		return
	}
	n := 0
	err = c.withQueue(r.Context(), func(q errorQueue) error {
		return q.Browse(r.Context(), c.cfg.Limit, func(msg *message.Message) (bool, error) {
			if !s.match(msg) {
				return false, nil
			}
			if err := do(q, msg); err != nil {
				return false, err
			}
			n++
			return true, nil
		})
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("nothing to do: %s is not in the first %d of the error topic %s", s, c.cfg.Limit, c.cfg.ErrorTopic)
	}
	if err != nil {
		c.log.Warn("console: "+done+" failed", "selection", s.String(), "err", c.redact(err))
		w.WriteHeader(http.StatusConflict)
		c.renderPage(w, r, "confirm_failed", page{Title: "Failed", Error: c.redact(err), Data: map[string]any{"Sel": s}})
		return
	}
	c.log.Info("console: "+done, "selection", s.String(), "messages", n)
	redirectDone(w, r, "/failed", done, fmt.Sprintf("%s (%d)", s, n))
}

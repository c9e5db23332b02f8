// Package amqptest gives tests RabbitMQ transports that leave nothing of
// their own behind: when a test ends, the queues and exchanges it declared
// are deleted, on a connection of the helper's. RabbitMQ keeps a durable
// queue until it is deleted; thousands left by earlier runs (each quorum
// queue a Raft group) kept a local broker busy and the suite timed out.
//
// # What is deleted
//
// Every queue and exchange that belongs to the test. Names that tests
// running at the same time share, in this package or another, are left:
// deleting one under a test that publishes to it would fail that publish.
// They are few and the same on every run, so they do not pile up. Shared
// are the topics named after a message type (bus.EventTopic:
// "sales.OrderPlaced", "postroom.CleanupStore"), the default error topic
// "error", and the error queues of such topics. A name belongs to the
// test when it holds a random part (12 hex digits or more, as
// testenv.Name and Watermill's UUIDs make) or is a command topic
// ("<endpoint>.cmd.<message>", bus.CommandTopic): tests name their
// endpoints with testenv.Name, and two tests sharing an endpoint on one
// broker would take each other's messages anyway. Any other queue is
// named after a group, which tests name after an endpoint or at random.
// A command topic that bus.CommandTopic shortened past its ".cmd." (a
// long message name, the endpoint's random part cut off) looks shared and
// is left.
//
// A queue is only deleted once nobody consumes it: another transport of
// the test, still open, deletes it in its own cleanup.
package amqptest

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// New returns a transport on the test broker (testenv.RequireAMQP sets
// cfg.URL). When the test ends, after the cleanups registered later (the
// buses that use it), it is closed, a failing Close failing the test, and
// what it declared is deleted (see Cleanup).
func New(t testing.TB, cfg amqp.Config) *amqp.Transport {
	t.Helper()
	cfg.URL = testenv.RequireAMQP(t)
	tr, err := amqp.New(cfg)
	if err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	Cleanup(t, tr)
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("amqptest: close the transport: %v", err)
		}
	})
	return tr
}

// Cleanup deletes, when the test ends, the queues and exchanges tr
// declared (tr.Declared) that belong to the test, after the cleanups
// registered later. It closes tr first (Close is idempotent), so that no
// subscriber of tr declares a queue again once it is gone. Call it right
// after creating tr, with the test that spans the use of its names.
func Cleanup(t testing.TB, tr *amqp.Transport) {
	t.Helper()
	url := testenv.AMQPURL()
	t.Cleanup(func() {
		_ = tr.Close()
		exchanges, queues := tr.Declared()
		deleteNames(t, url, exchanges, queues, 0)
	})
}

// DeleteTopic deletes, when the test ends, topic's exchange (if it belongs
// to the test) and its queues for groups: what a child process or a
// client other than a transport of this process declared. Call it before
// starting the child, so that it runs after the child is killed; it waits
// up to 10 s for a killed child's consumers to go.
func DeleteTopic(t testing.TB, topic string, groups ...string) {
	t.Helper()
	queues := make([]string, len(groups))
	for i, g := range groups {
		queues[i] = amqp.QueueName(topic, g)
	}
	url := testenv.AMQPURL()
	t.Cleanup(func() { deleteNames(t, url, []string{amqp.ExchangeName(topic)}, queues, 10*time.Second) })
}

var (
	randomPart  = regexp.MustCompile(`[0-9a-fA-F]{12}`)
	errorQueues = "_" + transport.ErrorQueueGroup
)

// shared reports whether a queue or exchange name may be in use by
// another test at the same time, so that a test's cleanup leaves it (see
// the package doc).
func shared(name string, queue bool) bool {
	if queue {
		topic, isErrorQueue := strings.CutSuffix(name, errorQueues)
		return isErrorQueue && shared(topic, false)
	}
	return !randomPart.MatchString(name) && !strings.Contains(name, ".cmd.")
}

// deleteNames deletes the queues, then the exchanges, that are not
// shared; a queue with consumers is waited for up to wait, then left.
func deleteNames(t testing.TB, url string, exchanges, queues []string, wait time.Duration) {
	d := &deleter{t: t, url: url}
	defer d.close()
	for _, q := range queues {
		if !shared(q, true) {
			d.queue(q, wait)
		}
	}
	for _, e := range exchanges {
		if !shared(e, false) {
			d.exchange(e)
		}
	}
}

// deleter deletes queues and exchanges on a connection of its own, opening
// a new channel (or connection) after the broker closes one.
type deleter struct {
	t    testing.TB
	url  string
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

func (d *deleter) channel() (*amqp091.Channel, error) {
	if d.ch != nil && !d.ch.IsClosed() {
		return d.ch, nil
	}
	if d.conn == nil || d.conn.IsClosed() {
		conn, err := amqp091.Dial(d.url)
		if err != nil {
			return nil, err
		}
		d.conn = conn
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return nil, err
	}
	d.ch = ch
	return ch, nil
}

// queue deletes a queue once it has no consumers. Quorum queues refuse
// queue.delete's if-unused flag, so the consumers are counted first.
func (d *deleter) queue(name string, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for {
		ch, err := d.channel()
		if err != nil {
			d.t.Errorf("amqptest: connect to delete queue %s: %v", name, err)
			return
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if isCode(err, amqp091.NotFound) {
			return // never declared, or deleted already
		}
		if err != nil {
			d.t.Errorf("amqptest: look up queue %s: %v", name, err)
			return
		}
		if q.Consumers == 0 {
			break
		}
		if time.Now().After(deadline) {
			d.t.Logf("amqptest: queue %s left: it has %d consumers", name, q.Consumers)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := d.ch.QueueDelete(name, false, false, false); err != nil {
		d.t.Errorf("amqptest: delete queue %s: %v", name, err)
	}
}

// exchange deletes an exchange unless a queue is still bound to it (one
// another transport of the test declared: it deletes both).
func (d *deleter) exchange(name string) {
	ch, err := d.channel()
	if err != nil {
		d.t.Errorf("amqptest: connect to delete exchange %s: %v", name, err)
		return
	}
	err = ch.ExchangeDelete(name, true, false)
	if isCode(err, amqp091.PreconditionFailed) {
		d.t.Logf("amqptest: exchange %s left: queues are bound to it", name)
		return
	}
	if err != nil {
		d.t.Errorf("amqptest: delete exchange %s: %v", name, err)
	}
}

func (d *deleter) close() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

func isCode(err error, code int) bool {
	var amqpErr *amqp091.Error
	return errors.As(err, &amqpErr) && amqpErr.Code == code
}

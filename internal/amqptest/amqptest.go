// Package amqptest gives tests RabbitMQ transports that leave nothing of
// their own behind: when a test ends, the queues and exchanges it declared
// are deleted (durable queues left by earlier runs piled up and slowed
// the broker until the suite timed out).
//
// # What is deleted
//
// Every queue and exchange that belongs to the test: a name with a random
// part (12 hex digits or more, as testenv.Name and Watermill's UUIDs make)
// or a command topic ("<endpoint>.cmd.<message>"). Names tests running at
// once may share are left, since deleting one would fail another test's
// publish: topics named after a message type (bus.EventTopic), the
// default error topic "error" and their error queues. They are few and
// the same on every run. A queue is deleted only once nobody consumes it.
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
// cfg.URL), closed when the test ends (a failing Close fails the test) and
// its names deleted (see Cleanup).
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

// Cleanup deletes, when the test ends, the names tr declared that belong
// to the test, after closing tr so nothing declares them again. Call it
// right after creating tr.
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
// to the test) and its queues for groups, as a child process declared
// them. Call it before starting the child; it waits up to 10 s for the
// killed child's consumers to go.
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

// shared reports whether another test may use name at once (see the
// package doc).
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

package amqp

import (
	"errors"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/logsink"
)

// Reconnect backoff of a subscriber's connection.
const (
	redialFirst = 100 * time.Millisecond
	redialMax   = 5 * time.Second
)

// connection is a subscriber's connection to RabbitMQ: after it is lost,
// it dials again, with backoff, until it is closed. (watermill-amqp's
// ConnectionWrapper does the same but writes its state without a lock,
// upstream ThreeDotsLabs/watermill#693.)
type connection struct {
	url  string
	log  *logsink.Sink
	what string // for the logs: "the subscriber of group g"

	mu      sync.Mutex
	conn    *amqp091.Connection // nil while reconnecting
	changed chan struct{}       // closed when conn changes
	closed  bool

	closing chan struct{}
	done    chan struct{} // closed when watch ends
}

// dial connects; the connection then reconnects by itself until Close.
func dial(url string, log *logsink.Sink, what string) (*connection, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, err
	}
	log.Logger().Info("amqp: connected " + what)
	c := &connection{url: url, log: log, what: what, conn: conn,
		changed: make(chan struct{}), closing: make(chan struct{}), done: make(chan struct{})}
	go c.watch(conn)
	return c, nil
}

// current returns the connection, or nil while reconnecting, and a channel
// closed when that changes.
func (c *connection) current() (*amqp091.Connection, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn, c.changed
}

// await waits for a usable connection: false if ctx or stop ends first.
func (c *connection) await(done, stop <-chan struct{}) bool {
	for {
		conn, changed := c.current()
		if conn != nil && !conn.IsClosed() {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		case <-stop:
			return false
		}
	}
}

// channel opens a channel on the current connection.
func (c *connection) channel() (*amqp091.Channel, error) {
	conn, _ := c.current()
	if conn == nil {
		return nil, errors.New("not connected to RabbitMQ (reconnecting)")
	}
	return conn.Channel()
}

// set makes conn the current connection; false once closed.
func (c *connection) set(conn *amqp091.Connection) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed && conn != nil {
		return false
	}
	c.conn = conn
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

// watch waits for conn to be lost and dials again, until Close.
func (c *connection) watch(conn *amqp091.Connection) {
	defer close(c.done)
	for {
		select {
		case err := <-conn.NotifyClose(make(chan *amqp091.Error, 1)):
			c.log.Logger().Warn("amqp: lost the connection of "+c.what+"; reconnecting", "error", err)
		case <-c.closing:
			return
		}
		c.set(nil)
		conn = c.redial()
		if conn == nil {
			return
		}
		if !c.set(conn) {
			_ = conn.Close()
			return
		}
		c.log.Logger().Info("amqp: connected " + c.what + " again")
	}
}

// redial dials until it connects (nil once closing).
func (c *connection) redial() *amqp091.Connection {
	wait := redialFirst
	for attempt := 1; ; attempt++ {
		select {
		case <-time.After(wait):
		case <-c.closing:
			return nil
		}
		conn, err := amqp091.Dial(c.url)
		if err == nil {
			return conn
		}
		c.log.Logger().Warn("amqp: reconnect "+c.what+" failed; trying again", "attempt", attempt, "error", err)
		wait = min(2*wait, redialMax)
	}
}

// Close stops reconnecting and closes the connection.
func (c *connection) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.closing)
	<-c.done
	conn, _ := c.current()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	return conn.Close()
}

package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/logsink"
)

// Reconnect backoff of a connection or consumer: from backoffFirst,
// doubling to backoffMax, ±20% jitter; reset once one lasted backoffMax.
const (
	backoffFirst = 100 * time.Millisecond
	backoffMax   = 5 * time.Second
)

// dialTimeout bounds the TCP connect and the AMQP handshake of a dial
// (amqp091's default; the URL's connection_timeout, in ms, replaces it).
const dialTimeout = 30 * time.Second

// closeWait bounds a subscriber's Close waiting for the broker, which a
// half-open TCP connection would hold until the heartbeat gives up (30 s).
const closeWait = 5 * time.Second

// nextBackoff returns the wait after wait, and the wait jittered.
func nextBackoff(wait time.Duration) (next, jittered time.Duration) {
	jittered = time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
	return min(2*wait, backoffMax), jittered
}

// connection is a subscriber's connection that redials with backoff until
// closed (watermill-amqp's ConnectionWrapper races:
// ThreeDotsLabs/watermill#693).
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

// up reports whether the connection is open (not reconnecting, not closed).
func (c *connection) up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.conn != nil && !c.conn.IsClosed()
}

// dial connects; the connection then reconnects by itself until Close.
func dial(url string, log *logsink.Sink, what string) (*connection, error) {
	c := &connection{url: url, log: log, what: what,
		changed: make(chan struct{}), closing: make(chan struct{}), done: make(chan struct{})}
	conn, err := c.dialOnce()
	if err != nil {
		return nil, err
	}
	c.conn = conn
	log.Logger().Info("amqp: connected " + what)
	go c.watch(conn)
	return c, nil
}

// dialOnce dials the broker; Close interrupts it.
func (c *connection) dialOnce() (*amqp091.Connection, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := dialContext(ctx, c.url)
	if err != nil && ctx.Err() != nil {
		return nil, errors.New("amqp: the subscriber closed while connecting")
	}
	return conn, err
}

// dialContext dials url; the end of ctx interrupts the TCP connect and the
// handshake, each bounded by dialTimeout (or the URL's connection_timeout).
func dialContext(ctx context.Context, url string) (*amqp091.Connection, error) {
	timeout := dialTimeout
	if uri, err := amqp091.ParseURI(url); err == nil && uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	var stopInterrupt func() bool
	conn, err := amqp091.DialConfig(url, amqp091.Config{Locale: "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil { // cleared after the handshake
				_ = nc.Close()
				return nil, err
			}
			stopInterrupt = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
			return nc, nil
		}})
	if stopInterrupt != nil && !stopInterrupt() && err == nil { // ctx ended just after the handshake
		_ = conn.Close()
		return nil, fmt.Errorf("amqp: connect: %w", context.Cause(ctx))
	}
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("amqp: connect: %w (%w)", context.Cause(ctx), err)
	}
	return conn, err
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
	wait := backoffFirst
	for {
		since := time.Now()
		select {
		case err := <-conn.NotifyClose(make(chan *amqp091.Error, 1)):
			c.log.Logger().Warn("amqp: lost the connection of "+c.what+"; reconnecting", "error", err)
		case <-c.closing:
			return
		}
		c.set(nil)
		if time.Since(since) >= backoffMax {
			wait = backoffFirst
		}
		conn, wait = c.redial(wait)
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

// redial dials until it connects, first after wait; it returns the
// connection (nil once closing) and the next wait.
func (c *connection) redial(wait time.Duration) (*amqp091.Connection, time.Duration) {
	for attempt := 1; ; attempt++ {
		next, jittered := nextBackoff(wait)
		select {
		case <-time.After(jittered):
		case <-c.closing:
			return nil, wait
		}
		wait = next
		conn, err := c.dialOnce()
		if err == nil {
			return conn, wait
		}
		if c.isClosing() {
			return nil, wait
		}
		c.log.Logger().Warn("amqp: reconnect "+c.what+" failed; trying again", "attempt", attempt, "error", err)
	}
}

func (c *connection) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// Close stops reconnecting and closes the connection, waiting for the
// broker's answer until deadline.
func (c *connection) Close(deadline time.Time) error {
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
	err := conn.CloseDeadline(deadline)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed): // past the deadline
		c.log.Logger().Warn("amqp: the broker did not answer the close of " + c.what + "; the connection is closed anyway")
		return nil
	case errors.Is(err, amqp091.ErrClosed):
		return nil
	}
	return err
}

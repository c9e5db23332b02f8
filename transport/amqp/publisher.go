package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/postroom/postroom/internal/logsink"
	"github.com/postroom/postroom/transport"
)

// mandatoryBatch is how many messages a publish sends before it waits for
// their confirms, and the capacity of the returns channel drained after
// each batch, so amqp091's reader never blocks on it.
const mandatoryBatch = 64

// errTransportClosed is returned by Publish and PublishMandatory after Close.
var errTransportClosed = errors.New("amqp: the transport is closed")

// confirmPublisher publishes on its own connection and a channel in
// confirm mode; with mandatory=true it fails for the messages no queue
// took. RabbitMQ sends basic.return before the basic.ack, and amqp091
// hands both over in order from one goroutine, so once a batch's confirms
// are in, its returns are in the returns channel.
//
// Publishes take turns (a channel, not a mutex), and each waits for its
// turn, its dial and its confirms only as long as its messages' context
// lasts, so a caller with a deadline never queues behind a hung broker.
type confirmPublisher struct {
	url    string
	log    *logsink.Sink
	record *declaredNames

	turn    chan struct{}   // holds one token while a publish runs
	closing context.Context // ended by close: interrupts a dial
	stop    context.CancelFunc

	conn     *amqp091.Connection
	connEnd  chan *amqp091.Error // conn's close reason (NotifyClose)
	closedBy *amqp091.Error      // read from connEnd once conn closed
	ch       *amqp091.Channel
	returns  chan amqp091.Return
	declared map[string]bool // exchanges declared on conn
	connects int
	closed   bool
}

func newConfirmPublisher(url string, log *logsink.Sink, record *declaredNames) *confirmPublisher {
	closing, cancel := context.WithCancel(context.Background())
	return &confirmPublisher{url: url, log: log, record: record,
		turn: make(chan struct{}, 1), closing: closing, stop: cancel}
}

// lock waits for the publisher's turn as long as ctx lasts.
func (p *confirmPublisher) lock(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-p.closing.Done():
		return errTransportClosed
	}
}

func (p *confirmPublisher) unlock() { <-p.turn }

func (p *confirmPublisher) publish(topic string, msgs []*message.Message, mandatory bool) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context() // the caller's (Send's) or the handler's; a background one waits as long as it takes
	if err := p.lock(ctx); err != nil {
		return fmt.Errorf("amqp: publish to topic %s: waiting for the publisher: %w", topic, err)
	}
	defer p.unlock()
	if p.closed {
		return errTransportClosed
	}
	var errs []error
	for batch := range chunk(msgs, mandatoryBatch) {
		err := p.publishBatch(ctx, topic, batch, mandatory)
		if errors.Is(err, errNothingSent) && ctx.Err() == nil {
			err = p.publishBatch(ctx, topic, batch, mandatory) // reconnect, once
		}
		if errors.Is(err, errNothingSent) {
			return fmt.Errorf("amqp: publish to topic %s: %w", topic, err)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func chunk(msgs []*message.Message, n int) func(func([]*message.Message) bool) {
	return func(yield func([]*message.Message) bool) {
		for len(msgs) > 0 {
			k := min(n, len(msgs))
			if !yield(msgs[:k]) {
				return
			}
			msgs = msgs[k:]
		}
	}
}

// errNothingSent marks a failure before the first message of a batch was
// handed to the broker, so a retry cannot duplicate anything.
var errNothingSent = errors.New("nothing was sent")

type nothingSent struct{ err error }

func (e nothingSent) Error() string        { return e.err.Error() }
func (e nothingSent) Unwrap() error        { return e.err }
func (e nothingSent) Is(target error) bool { return target == errNothingSent }

func (p *confirmPublisher) publishBatch(ctx context.Context, topic string, msgs []*message.Message, mandatory bool) (err error) {
	if err := p.open(ctx); err != nil {
		return err
	}
	// After any failure but a return, this batch's confirms may still
	// arrive: the next batch gets a fresh channel.
	defer func() {
		if err != nil && !errors.Is(err, transport.ErrNoRoute) {
			p.reset()
		}
	}()
	exchange := ExchangeName(topic)
	if !p.declared[exchange] {
		// As watermill-amqp's durable pub/sub config declares it.
		p.record.exchange(exchange)
		if err := p.ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil); err != nil {
			return nothingSent{fmt.Errorf("amqp: declare exchange %s (fanout, durable) for topic %s: %w", exchange, topic, p.lost(err))}
		}
		p.declared[exchange] = true
	}

	pubs := make([]amqp091.Publishing, len(msgs))
	for i, msg := range msgs {
		if pubs[i], err = (Marshaler{}).Marshal(msg); err != nil {
			return fmt.Errorf("amqp: marshal message %s: %w", msg.UUID, err)
		}
	}
	confirms := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i, msg := range msgs {
		c, err := p.ch.PublishWithDeferredConfirmWithContext(msg.Context(), exchange, "", mandatory, false, pubs[i])
		if err != nil {
			if i == 0 && p.ch.IsClosed() {
				return nothingSent{fmt.Errorf("amqp: publish message %s to topic %s: %w", msg.UUID, topic, p.lost(err))}
			}
			return fmt.Errorf("amqp: publish message %s to topic %s: %w", msg.UUID, topic, p.lost(err))
		}
		confirms[i] = c
	}

	for i, c := range confirms {
		msg := msgs[i]
		ok, err := c.WaitContext(msg.Context())
		if err != nil {
			return fmt.Errorf("amqp: wait for the broker's confirm of message %s to topic %s: %w", msg.UUID, topic, err)
		}
		if !ok {
			if p.ch.IsClosed() {
				return p.lost(fmt.Errorf("amqp: the channel closed before the broker confirmed message %s to topic %s: publish it again", msg.UUID, topic))
			}
			return fmt.Errorf("amqp: the broker refused message %s to topic %s (basic.nack): publish it again", msg.UUID, topic)
		}
	}

	returned := map[string]amqp091.Return{}
drain:
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				break drain
			}
			returned[returnedID(r)] = r
		default:
			break drain
		}
	}
	var errs []error
	for _, msg := range msgs {
		if r, ok := returned[msg.UUID]; ok { // copies of one UUID route alike
			errs = append(errs, fmt.Errorf("amqp: message %s to topic %s reached no queue (%d %s): "+
				"no queue is bound to exchange %s; start the endpoint that subscribes to it, or check the topic name: %w",
				msg.UUID, topic, r.ReplyCode, r.ReplyText, exchange, transport.ErrNoRoute))
		}
	}
	return errors.Join(errs...)
}

// returnedID is the ID Marshal gave a returned message.
func returnedID(r amqp091.Return) string {
	if id, ok := r.Headers[uuidHeader].(string); ok && id != "" {
		return id
	}
	return r.MessageId
}

// lost marks err transport.Unreachable when the connection was lost to
// something that says nothing about the messages (connectionLost), or a
// write failed, so the relays do not count the attempt against a sound
// message. A close the broker made on another error may be the message's
// doing, and err stays as it is.
func (p *confirmPublisher) lost(err error) error {
	var netErr net.Error
	if errors.As(err, &netErr) {
		return transport.Unreachable(fmt.Errorf("%w (the connection failed)", err))
	}
	if p.conn == nil || !p.conn.IsClosed() {
		return err
	}
	if p.closedBy == nil {
		// amqp091 marks the connection closed a moment before it hands
		// connEnd the reason.
		select {
		case e := <-p.connEnd:
			p.closedBy = e
		case <-time.After(time.Second):
		}
	}
	if e := p.closedBy; e != nil && connectionLost(e) {
		return transport.Unreachable(fmt.Errorf("%w (the connection was lost: %v)", err, e))
	}
	return err
}

// connectionLost reports whether a connection closed with e was lost to
// the network (amqp091's frame error: I/O, a missed heartbeat) or to a
// broker shutdown or operator (320 CONNECTION_FORCED).
func connectionLost(e *amqp091.Error) bool {
	if e.Server {
		return e.Code == amqp091.ConnectionForced
	}
	return e.Code == amqp091.FrameError
}

// open connects and opens the confirm channel if they are not open; the
// end of ctx or close interrupts the connect.
func (p *confirmPublisher) open(ctx context.Context) error {
	if p.conn == nil || p.conn.IsClosed() {
		p.reset()
		dialCtx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(p.closing, cancel)
		conn, err := dialContext(dialCtx, p.url)
		stop()
		cancel()
		if err != nil {
			return nothingSent{fmt.Errorf("amqp: connect the publisher: %w", transport.Unreachable(err))}
		}
		p.conn = conn
		p.connEnd, p.closedBy = conn.NotifyClose(make(chan *amqp091.Error, 1)), nil
		p.declared = map[string]bool{}
		p.connects++
		if p.connects == 1 {
			p.log.Logger().Info("amqp: connected the publisher")
		} else {
			p.log.Logger().Info("amqp: reconnected the publisher", "connects", p.connects)
		}
	}
	if p.ch == nil || p.ch.IsClosed() {
		ch, err := p.conn.Channel()
		if err != nil {
			p.reset()
			return nothingSent{fmt.Errorf("amqp: open the publisher's channel: %w", err)}
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			p.reset()
			return nothingSent{fmt.Errorf("amqp: put the publisher's channel in confirm mode: %w", err)}
		}
		p.ch = ch
		p.returns = ch.NotifyReturn(make(chan amqp091.Return, mandatoryBatch))
	}
	return nil
}

// reset closes the channel (and the connection if it is closed or broken),
// so the next publish opens fresh ones.
func (p *confirmPublisher) reset() {
	if p.ch != nil {
		// Channel.Close waits for amqp091's reader, which may block on a
		// full returns channel: drain it until closed.
		go func(returns chan amqp091.Return) {
			for range returns {
			}
		}(p.returns)
		_ = p.ch.Close()
		p.ch, p.returns = nil, nil
	}
	if p.conn != nil && p.conn.IsClosed() {
		p.conn = nil
	}
	p.declared = map[string]bool{} // an exchange deleted since is declared again
}

// close closes the channel and the connection, interrupting a dial; later
// publishes fail.
func (p *confirmPublisher) close() error {
	p.stop()
	p.turn <- struct{}{}
	defer p.unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.reset()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	if errors.Is(err, amqp091.ErrClosed) {
		return nil
	}
	return err
}

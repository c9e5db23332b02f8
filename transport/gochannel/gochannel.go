package gochannel

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// OutputBufferDefault is the buffer of each GoChannel subscription.
const OutputBufferDefault = 64

// Config configures the in-memory transport.
type Config struct {
	// OutputBuffer is the buffer of each GoChannel subscription and of each
	// group's queue. Defaults to 64.
	OutputBuffer int64
	// Logger is Watermill's logger. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Transport is the in-memory transport.
type Transport struct {
	pubsub *gochannel.GoChannel
	buffer int64
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	queues map[queueKey]chan *message.Message
	pumps  sync.WaitGroup
}

type queueKey struct{ group, topic string }

// New returns an in-memory transport.
func New(cfg Config) *Transport {
	if cfg.OutputBuffer == 0 {
		cfg.OutputBuffer = OutputBufferDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		pubsub: gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: cfg.OutputBuffer}, cfg.Logger),
		buffer: cfg.OutputBuffer,
		ctx:    ctx,
		cancel: cancel,
		queues: map[queueKey]chan *message.Message{},
	}
}

// Publisher returns the pub/sub.
func (t *Transport) Publisher() message.Publisher { return t.pubsub }

// Subscriber returns a subscriber of one queue group.
func (t *Transport) Subscriber(group string) (message.Subscriber, error) {
	return &groupSubscriber{t: t, group: group}, nil
}

// Competing is true: subscriptions of one group share its messages.
func (t *Transport) Competing() bool { return true }

// Close stops every queue and closes the pub/sub.
func (t *Transport) Close() error {
	t.cancel()
	err := t.pubsub.Close()
	t.pumps.Wait()
	return err
}

// queue returns the channel a group's subscriptions to topic share,
// subscribing to the pub/sub the first time.
func (t *Transport) queue(group, topic string) (chan *message.Message, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := queueKey{group, topic}
	if q, ok := t.queues[key]; ok {
		return q, nil
	}
	upstream, err := t.pubsub.Subscribe(t.ctx, topic)
	if err != nil {
		return nil, err
	}
	// Buffered: the pump acks the GoChannel at once and the group's next
	// message is waiting when a subscription finishes one, instead of a
	// chain of goroutine wake-ups per message.
	q := make(chan *message.Message, t.buffer)
	t.queues[key] = q
	t.pumps.Add(1)
	go func() {
		defer t.pumps.Done()
		for msg := range upstream {
			select {
			case q <- msg: // queued for the group's subscriptions
				msg.Ack()
			case <-t.ctx.Done():
				msg.Nack()
				return
			}
		}
	}()
	return q, nil
}

type groupSubscriber struct {
	t     *Transport
	group string
}

// Subscribe returns one competing subscription of the group to topic.
func (s *groupSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	q, err := s.t.queue(s.group, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for {
			select {
			case msg := <-q:
				if !deliver(ctx, s.t.ctx, msg, out) {
					return
				}
			case <-ctx.Done():
				return
			case <-s.t.ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// deliver hands msg to the subscription until it is acked, again after
// each nack. It reports false when the subscription or transport closed.
func deliver(ctx, transportCtx context.Context, msg *message.Message, out chan<- *message.Message) bool {
	for {
		m := msg.Copy()
		m.SetContext(ctx)
		select {
		case out <- m:
		case <-ctx.Done():
			return false
		case <-transportCtx.Done():
			return false
		}
		select {
		case <-m.Acked():
			return true
		case <-m.Nacked():
		case <-ctx.Done():
			return false
		case <-transportCtx.Done():
			return false
		}
	}
}

// Close does nothing: subscriptions end with their context or the transport.
func (s *groupSubscriber) Close() error { return nil }

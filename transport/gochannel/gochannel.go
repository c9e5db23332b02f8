// Package gochannel is the embedded, in-memory transport: Watermill's
// GoChannel pub/sub. Messages live only in the process; a message published
// to a topic nobody subscribes to is dropped. Each subscription receives
// every message of its topic, so a handler runs with a concurrency of one.
package gochannel

import (
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// OutputBufferDefault is the buffer of each subscription's channel.
const OutputBufferDefault = 64

// Config configures the in-memory transport.
type Config struct {
	// OutputBuffer is the buffer of each subscription's channel. Defaults to 64.
	OutputBuffer int64
	// Logger is Watermill's logger. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Transport is the in-memory transport.
type Transport struct {
	pubsub *gochannel.GoChannel
}

// New returns an in-memory transport.
func New(cfg Config) *Transport {
	if cfg.OutputBuffer == 0 {
		cfg.OutputBuffer = OutputBufferDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	return &Transport{pubsub: gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: cfg.OutputBuffer}, cfg.Logger)}
}

// Publisher returns the pub/sub.
func (t *Transport) Publisher() message.Publisher { return t.pubsub }

// Subscriber returns the pub/sub; groups do not exist in memory.
func (t *Transport) Subscriber(string) (message.Subscriber, error) { return t.pubsub, nil }

// Competing is false: every subscription gets every message.
func (t *Transport) Competing() bool { return false }

// Close closes the pub/sub.
func (t *Transport) Close() error { return t.pubsub.Close() }

package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestACleanStopRelaysNoMessageTwice, on PostgreSQL and MariaDB, in
// memory and on RabbitMQ, stopped by Run's context and by Close: a bus
// with the outbox on (and no handler: a sender-only job) stopped while its
// relay publishes a batch of the shared outbox, then another bus relaying
// the rest: every message is published once. The stop lets the publish
// in flight finish and the batch's published messages be marked relayed.
// A stop that ends the relay's subscription at once makes watermill-sql's
// ack of the batch fail ("could not get args for acking the message:
// context canceled"), and the next relay publishes the batch's messages
// again.
func TestACleanStopRelaysNoMessageTwice(t *testing.T) {
	const total, stopAt = 600, 150 // the relay reads 100 rows a batch: the stop comes mid-batch
	transports := []struct {
		name string
		open func(t *testing.T) transport.Transport
	}{
		{"gochannel", func(*testing.T) transport.Transport { return gochannel.New(gochannel.Config{}) }},
		{"amqp", func(t *testing.T) transport.Transport {
			tr, err := amqp.New(amqp.Config{URL: testenv.RequireAMQP(t)})
			require.NoError(t, err)
			amqptest.Cleanup(t, tr)
			return tr
		}},
	}
	for _, database := range testenv.ServerDatabases {
		for _, tr := range transports {
			for _, byClose := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s+%s/by Close=%v", database.Name, tr.name, byClose), func(t *testing.T) {
					db := database.Open(t)
					writeOutbox(t, db, total)
					counts := &publishCounts{got: map[string]int{}}
					relay := func(until func() bool, byClose bool) {
						b, err := bus.New(bus.Config{Endpoint: testenv.Name("sender"), DB: db, Outbox: true,
							Transport: countingTransport{tr.open(t), counts},
							Logger:    testenv.Logger(t), Cleanup: bus.CleanupSchedule{Disabled: true}})
						require.NoError(t, err)
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						done := make(chan error, 1)
						go func() { done <- b.Run(ctx) }()
						waitFor(t, "the relay's publishes", until)
						if byClose {
							require.NoError(t, b.Close())
							require.NoError(t, <-done)
							return
						}
						cancel()
						require.NoError(t, <-done)
						require.NoError(t, b.Close())
					}
					relay(func() bool { return counts.total() >= stopAt }, byClose)
					published := counts.total()
					require.Less(t, published, total, "the stop came while the relay published")
					relay(func() bool { return counts.distinct() == total }, false)
					twice := counts.twice()
					t.Logf("%d published before the stop; %d of %d published more than once", published, len(twice), total)
					require.Empty(t, twice, "published again after a clean stop")
				})
			}
		}
	}
}

// writeOutbox commits n events to the outbox in one transaction, as the
// handlers of the services sharing the database do.
func writeOutbox(t *testing.T, db *gorm.DB, n int) {
	writer, err := outbox.New(outbox.Config{DB: db, Destination: noDestination{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, writer.Close()) }()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("event-%04d", i), []byte("{}"))
	}
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		return writer.Publish(context.Background(), tx, "test.Shipped", msgs...)
	}))
}

// noDestination is a destination that is never published to.
type noDestination struct{}

func (noDestination) Publish(string, ...*message.Message) error { return nil }
func (noDestination) Close() error                              { return nil }

// publishCounts counts the publishes of each message ID to test.Shipped.
type publishCounts struct {
	mu  sync.Mutex
	got map[string]int
	n   int
}

func (c *publishCounts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *publishCounts) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *publishCounts) twice() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, n := range c.got {
		if n > 1 {
			ids = append(ids, id)
		}
	}
	return ids
}

// countingTransport counts what its publisher publishes to test.Shipped,
// each message after a millisecond (the relay takes a while over a batch).
type countingTransport struct {
	transport.Transport
	counts *publishCounts
}

func (t countingTransport) Publisher() message.Publisher {
	return countingPublisher{t.Transport.Publisher(), t.counts}
}

type countingPublisher struct {
	message.Publisher
	counts *publishCounts
}

func (p countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic != "test.Shipped" {
		return p.Publisher.Publish(topic, msgs...)
	}
	for _, m := range msgs {
		time.Sleep(time.Millisecond)
		if err := p.Publisher.Publish(topic, m); err != nil {
			return err
		}
		p.counts.mu.Lock()
		p.counts.got[m.UUID]++
		p.counts.n++
		p.counts.mu.Unlock()
	}
	return nil
}

package sql

import (
	"context"
	"fmt"
	"sync"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport"
)

// subscriber is watermill-sql's subscriber of one group. The group gets its
// offsets row when it declares a topic: at the topic's end for an event
// topic (SubscribeInitializeFromNow: a handler added later does not get
// the events published before it existed), at its start otherwise (a
// command sent before its endpoint first ran waits for it).
type subscriber struct {
	*wsql.Subscriber
	t     *Transport
	group string

	closing   chan struct{} // closed by Close: forwarders stop offering
	closeOnce sync.Once
	forwards  sync.WaitGroup // one per Subscribe, until its channel is closed
}

func newSubscriber(sub *wsql.Subscriber, t *Transport, group string) *subscriber {
	return &subscriber{Subscriber: sub, t: t, group: group, closing: make(chan struct{})}
}

var (
	_ message.SubscribeInitializer = (*subscriber)(nil)
	_ transport.FromNow            = (*subscriber)(nil)
)

// SubscribeInitialize creates topic's tables and, unless it has one, the
// group's offsets row at the topic's first message.
func (s *subscriber) SubscribeInitialize(topic string) error { return s.declare(topic, false) }

// SubscribeInitializeFromNow creates topic's tables and, unless it has one,
// the group's offsets row at the topic's end.
func (s *subscriber) SubscribeInitializeFromNow(topic string) error { return s.declare(topic, true) }

func (s *subscriber) declare(topic string, fromNow bool) error {
	if err := s.Subscriber.SubscribeInitialize(topic); err != nil {
		return fmt.Errorf("sql: declare topic %s for group %s: %w", topic, s.group, err)
	}
	if err := s.start(topic, fromNow); err != nil {
		return fmt.Errorf("sql: start group %s on topic %s: %w", s.group, topic, err)
	}
	return nil
}

// start gives the group its offsets row on topic, unless it has one.
func (s *subscriber) start(topic string, fromNow bool) error {
	q := s.t.dialect.GroupStarts(topic)
	db := s.t.cfg.DB
	var exists []int
	if err := db.Raw(q.Exists, s.group).Scan(&exists).Error; err != nil || len(exists) > 0 {
		return err
	}
	switch {
	case !fromNow:
		return db.Exec(q.InsertAtStart, s.group).Error
	case q.End == "":
		return db.Exec(q.Insert, s.group).Error
	}
	var end int64
	if err := db.Raw(q.End).Scan(&end).Error; err != nil {
		return err
	}
	return db.Exec(q.Insert, s.group, end, end).Error
}

// Subscribe reads topic for the group, from where the group stopped, or
// for a group that never declared it, from the topic's first message.
//
// Its channel is watermill-sql's, forwarded, so that Close returns only
// once it is closed: watermill-sql's Close returns when its reading ends,
// a moment before it closes the channel.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	s.forwards.Add(1)
	go func() {
		defer s.forwards.Done()
		defer close(out)
		for msg := range in {
			select {
			case out <- msg:
			case <-s.closing: // not acked: watermill-sql delivers it again later
			case <-ctx.Done():
			}
		}
	}()
	return out, nil
}

// Close stops every subscription and returns once their channels are
// closed.
func (s *subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	err := s.Subscriber.Close()
	s.forwards.Wait()
	return err
}

package sql

import (
	"context"
	"fmt"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// subscriber is watermill-sql's subscriber of one group, whose group
// starts reading a topic where the topic ends when it first subscribes
// (or declares its queue with SubscribeInitialize), as a queue declared on
// a broker does: a handler added later does not get the messages published
// before it existed.
type subscriber struct {
	*wsql.Subscriber
	t     *Transport
	group string
}

var _ message.SubscribeInitializer = (*subscriber)(nil)

// SubscribeInitialize creates topic's tables and the group's offsets row.
func (s *subscriber) SubscribeInitialize(topic string) error {
	if err := s.Subscriber.SubscribeInitialize(topic); err != nil {
		return fmt.Errorf("sql: declare topic %s for group %s: %w", topic, s.group, err)
	}
	if err := s.startNow(topic); err != nil {
		return fmt.Errorf("sql: start group %s at the end of topic %s: %w", s.group, topic, err)
	}
	return nil
}

// startNow gives the group its offsets row at the end of topic, unless it
// has one.
func (s *subscriber) startNow(topic string) error {
	q := s.t.dialect.GroupStarts(topic)
	db := s.t.cfg.DB
	var exists []int
	if err := db.Raw(q.Exists, s.group).Scan(&exists).Error; err != nil || len(exists) > 0 {
		return err
	}
	if q.End == "" {
		return db.Exec(q.Insert, s.group).Error
	}
	var end int64
	if err := db.Raw(q.End).Scan(&end).Error; err != nil {
		return err
	}
	return db.Exec(q.Insert, s.group, end, end).Error
}

// Subscribe reads topic for the group, from where the group stopped, or
// from now for a new group.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

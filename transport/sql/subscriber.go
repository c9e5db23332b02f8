package sql

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/drain"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// subscriber is watermill-sql's subscriber of one group (see
// transport.FromNow for where the group starts reading).
type subscriber struct {
	*wsql.Subscriber
	t     *Transport
	group string

	// drain counts the subscriptions until their channels close. Close's
	// stop makes them settle what they hold; its cut, at most closeGrace
	// later, makes forwarders stop offering.
	drain *drain.Drain

	mu       sync.Mutex
	handling map[string]chan struct{} // by topic and message ID: closed when that delivery is settled
	late     map[string]returns       // by topic and message ID: deliveries that ended unsettled
	read     map[string]bool          // the topics of which this subscriber handed out a message
}

func newSubscriber(sub *wsql.Subscriber, t *Transport, group string) *subscriber {
	return &subscriber{Subscriber: sub, t: t, group: group, drain: drain.New(closeGrace),
		handling: map[string]chan struct{}{}, late: map[string]returns{}, read: map[string]bool{}}
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
	if err := s.binaryGroups(topic); err != nil {
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

// Subscribe reads topic for the group from where the group stopped (from
// the start for a group that never declared it). The channel is
// watermill-sql's, forwarded, so that Close returns only once it is closed.
//
// When ctx ends, the channel closes and the message handed out is still
// settled. watermill-sql's reading runs on a context of its own, ended once
// nothing is handed out and the last ack is committed (at most
// ackCommitGrace later), or at Close: ended with ctx, it would roll back
// an ack made around the stop.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	rd := &reads{}
	reading, stopReading := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), readsKey{}, rd))
	in, err := s.Subscriber.Subscribe(reading, topic)
	if err != nil {
		stopReading()
		return nil, err
	}
	out := make(chan *message.Message)
	var mu sync.Mutex
	handedOut := false
	var acked time.Time              // the last ack given to watermill-sql, until it reads the next message
	var ackCommitted <-chan struct{} // closed when the transaction recording that ack ends
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case handedOut: // stopped once it is settled (below)
		case !acked.IsZero() && time.Since(acked) < ackCommitGrace:
			// Ending the read's context now would roll back that ack.
			committed, grace := ackCommitted, time.NewTimer(ackCommitGrace-time.Since(acked))
			go func() {
				defer stopReading()
				defer grace.Stop()
				select {
				case <-committed:
				case <-grace.C:
				}
			}()
		default:
			stopReading()
		}
	})
	s.drain.Add()
	go func() {
		defer s.drain.Done()
		defer close(out)
		defer stopReading()
		defer stopWatch()
		for {
			var msg *message.Message
			var readIn <-chan struct{} // the transaction that read msg, open until it records msg's ack
			select {
			case m, open := <-in:
				if !open {
					return
				}
				msg, readIn = m, rd.current()
			case <-s.drain.Stopping(): // Close, and nothing held
				return
			}
			mu.Lock()
			acked = time.Time{}                        // read after the last ack's commit
			if ctx.Err() != nil || s.drain.Stopped() { // not handed out: rolled back with the read
				mu.Unlock()
				return
			}
			handedOut = true
			mu.Unlock()
			ok := s.forward(ctx, topic, msg, out)
			mu.Lock()
			handedOut = false
			if ok {
				acked, ackCommitted = time.Now(), readIn
			}
			stopped := ctx.Err() != nil || s.drain.Stopped()
			mu.Unlock()
			if stopped {
				if ok {
					s.awaitCommit(in, ackCommitted)
				}
				return
			}
		}
	}()
	return out, nil
}

// ackCommitGrace bounds how long a stopped subscription waits for the
// commit of its last ack (awaitCommit); an ack committed later is rolled
// back and the message handled again. Only a slow commit waits that long,
// and on a loaded machine one can take over a second.
const ackCommitGrace = 5 * time.Second

// awaitCommit waits until the ack just given is committed (its transaction
// ended, or the next read began), or ackCommitGrace passed.
func (s *subscriber) awaitCommit(in <-chan *message.Message, committed <-chan struct{}) {
	grace := time.NewTimer(ackCommitGrace)
	defer grace.Stop()
	select {
	case <-committed:
	case <-in:
	case <-grace.C:
	case <-s.drain.Context().Done():
	}
}

// firstRead reports whether this is the first message of topic the
// subscriber hands out, marked metadata.RedeliveredFirstRead (see the
// package doc, "A message that ends its process").
func (s *subscriber) firstRead(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read[topic] {
		return false
	}
	s.read[topic] = true
	return true
}

// forward hands msg on and waits until it is settled. Past the ack
// deadline watermill-sql reads the message again while the first handler
// may still run, so a copy waits here until no other delivery of it is
// handled in this process (or its own deadline passes). A late ack is
// logged at error; nacks and late acks are counted in the copies'
// metadata.DeliveryCount for the poison-loop guard (see the package doc,
// "Thirty seconds per message").
func (s *subscriber) forward(ctx context.Context, topic string, msg *message.Message, out chan<- *message.Message) (acked bool) {
	read := msg.Context() // watermill-sql's: it ends at the deadline
	key := topic + "\x00" + msg.UUID
	settled, ok := s.take(ctx, key, read)
	if !ok {
		return false // not acked: watermill-sql delivers it again
	}
	defer s.release(key, settled)
	// The handler gets a copy, so that an ack is checked against the
	// deadline before watermill-sql sees it. The copy's context also ends
	// with ctx, while the read's goes on until the copy is settled.
	cp := msg.Copy()
	cpCtx, cancel := context.WithCancel(read)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	cp.SetContext(cpCtx)
	if n := s.returnCount(key); n > 0 {
		cp.Metadata.Set(metadata.DeliveryCount, strconv.Itoa(n))
	}
	if s.firstRead(topic) {
		cp.Metadata.Set(metadata.Redelivered, metadata.RedeliveredFirstRead)
	}
	select {
	case out <- cp:
	case <-s.drain.Context().Done():
		return false
	case <-ctx.Done():
		return false
	}
	start := time.Now()
	select {
	case <-cp.Acked():
	case <-cp.Nacked():
		s.returned(key)
		msg.Nack()
		return false
	case <-s.drain.Context().Done():
		select {
		case <-cp.Acked(): // an ack that raced the Close still counts
		default:
			return false
		}
	}
	late := pastDeadline(read) // before watermill-sql sees the ack
	msg.Ack()
	if late {
		s.lateAck(key, topic, msg, time.Since(start))
		return false // not recorded: nothing to wait for
	}
	return true
}

// pastDeadline reports whether read, a delivery's context, ended at its
// deadline. Err alone does not say (watermill-sql's cancel races the
// deadline); one ended before its deadline was ended by a stop. Not atomic
// with watermill-sql's wait: an ack just before the deadline may be
// dropped uncounted, and the message is delivered again.
func pastDeadline(read context.Context) bool {
	deadline, ok := read.Deadline()
	return read.Err() != nil && ok && !time.Now().Before(deadline)
}

// take marks the delivery of key as handled once no other is; ok is false
// when read or the subscription ended first.
func (s *subscriber) take(ctx context.Context, key string, read context.Context) (settled chan struct{}, ok bool) {
	for {
		s.mu.Lock()
		busy, found := s.handling[key]
		if !found {
			settled = make(chan struct{})
			s.handling[key] = settled
			s.mu.Unlock()
			return settled, true
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-read.Done():
			return nil, false
		case <-s.drain.Context().Done():
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}

// release ends the handling of the delivery of key that took settled.
func (s *subscriber) release(key string, settled chan struct{}) {
	s.mu.Lock()
	delete(s.handling, key)
	s.mu.Unlock()
	close(settled)
}

// returns counts a message's deliveries nacked or acked late in this process.
type returns struct {
	n    int
	last time.Time
}

// returnCount is how many deliveries of key ended unsettled, the last less
// than lateMemory deadlines ago (the copies' metadata.DeliveryCount).
func (s *subscriber) returnCount(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.late[key]
	if ok && time.Since(l.last) > lateMemory*s.t.cfg.AckDeadline {
		delete(s.late, key)
		return 0
	}
	return l.n
}

// returned counts a delivery of key that ended unsettled.
func (s *subscriber) returned(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.late) >= lateLimit {
		clear(s.late) // counts of messages settled since, as a rule
	}
	l := s.late[key]
	l.n++
	l.last = time.Now()
	s.late[key] = l
	return l.n
}

// lateLimit bounds the returns a subscriber remembers, and lateMemory how
// long, in ack deadlines (copies come within a deadline or two). A count
// is not forgotten at an ack in time: on PostgreSQL another subscription
// may have read a copy before that ack committed, and it must carry the
// count.
const (
	lateLimit  = 10_000
	lateMemory = 4
)

// lateAck records an ack made after the delivery's deadline, which
// watermill-sql does not record: it delivers the message again.
func (s *subscriber) lateAck(key, topic string, msg *message.Message, took time.Duration) {
	n := s.returned(key)
	s.t.log.Logger().Error("sql: a message was acked after the transport's ack deadline, which watermill-sql does not record: it is delivered again; handle a message, retries included, within Config.AckDeadline",
		"topic", topic, "group", s.group, "message_id", msg.UUID, "handled_for", took.Round(time.Millisecond),
		"ack_deadline", s.t.cfg.AckDeadline, "returns", n)
}

// Close stops every subscription and returns once their channels are
// closed. It first lets each settle what it holds, its ack committed, for
// at most closeGrace: ending the reading at once would roll back acks made
// just before Close, and those messages would be handled again.
func (s *subscriber) Close() error {
	s.drain.Stop()
	s.drain.Wait(s.drain.Context().Done())
	s.drain.Cut()
	err := s.Subscriber.Close()
	s.drain.Wait(nil)
	return err
}

// closeGrace bounds how long Close waits for subscriptions to settle what
// they hold.
const closeGrace = ackCommitGrace + time.Second

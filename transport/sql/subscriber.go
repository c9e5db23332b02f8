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

// subscriber is watermill-sql's subscriber of one group. The group gets its
// offsets row when it declares a topic: at the topic's end for an event
// topic (SubscribeInitializeFromNow: a handler added later does not get
// the events published before it existed), at its start otherwise (a
// command sent before its endpoint first ran waits for it).
type subscriber struct {
	*wsql.Subscriber
	t     *Transport
	group string

	// drain counts the subscriptions until their channels are closed. Its
	// stop, begun by Close, makes them take no more and settle what they
	// hold; its cut, at most closeGrace later, makes forwarders stop
	// offering.
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

// Subscribe reads topic for the group, from where the group stopped, or
// for a group that never declared it, from the topic's first message.
//
// Its channel is watermill-sql's, forwarded, so that Close returns only
// once it is closed: watermill-sql's Close returns when its reading ends,
// a moment before it closes the channel.
//
// When ctx ends, the channel closes and the message handed out is still
// settled by its ack or nack (a stopping bus lets it finish; its context
// ends with ctx). watermill-sql's reading, whose transaction holds the
// message, runs on a context of its own for that: it ends once nothing is
// handed out and the last ack is committed (the transaction that read it
// ended, see reads; at most ackCommitGrace after the ack), or at Close.
// Ended with ctx, it would roll back an ack made just before or after the
// stop with the read, and the message would be handled again.
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
			// watermill-sql may still be committing that ack, on the read's
			// context: ending it now would roll the ack back.
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

// ackCommitGrace bounds how long a stopped subscription waits for
// watermill-sql to commit the ack of its last message (awaitCommit). An
// ack whose commit outlasts it is rolled back with the read, and the
// message is handled again (the inbox skips it). It waits for the commit,
// not the grace (TestAnAckJustBeforeAStopHolds), so a longer grace costs
// only a stop whose commit is slow: 5 s, since a commit on a loaded
// machine can take over a second.
const ackCommitGrace = 5 * time.Second

// awaitCommit waits until watermill-sql has committed the ack it was just
// given: the transaction that recorded it ended (committed), or the next
// read began, after that commit (the message read is not handed out and
// goes back with the read), or ackCommitGrace passed.
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

// firstRead reports whether this is the first message of topic that the
// subscriber hands out. A group reads a topic in order, and a message
// whose handling ended its process is not acked: the next process to read
// the topic for the group reads it first. So the first read of each topic
// in a process is marked metadata.RedeliveredFirstRead (it may have been
// delivered before), and the bus counts it in the database
// (postroom_deliveries), each count after the first as a delivery before:
// a message that kills each process that reads it reaches the error topic
// after bus.Config.MaxDeliveries instead of being read by each restarted
// process forever. A process that started earlier and takes such a
// message over from one that died does not count it; once every process
// it reached has died and restarted, each read of it counts.
func (s *subscriber) firstRead(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read[topic] {
		return false
	}
	s.read[topic] = true
	return true
}

// forward hands msg on and waits until it is settled, as watermill-sql
// does until the ack deadline. Past the deadline watermill-sql stops
// waiting: it reads the message again and hands the copy to a
// subscription of the group, while the handler of the first may still
// run. So a copy waits here until no other delivery of its message is
// being handled in this process (or its own deadline passes: then it is
// read again), and a delivery acked after its deadline (its context has
// ended: watermill-sql stopped waiting and does not record the ack) is
// logged at error. A delivery nacked or acked late is counted in the
// copies' metadata.DeliveryCount: the bus's poison-loop guard moves a
// message nacked in a loop, or whose handler always outlives the deadline,
// to the error topic after Config.MaxDeliveries. Without this, such a
// handler would run again at every deadline, two runs at a time, without
// a log line, forever.
func (s *subscriber) forward(ctx context.Context, topic string, msg *message.Message, out chan<- *message.Message) (acked bool) {
	read := msg.Context() // watermill-sql's: it ends at the deadline
	key := topic + "\x00" + msg.UUID
	settled, ok := s.take(ctx, key, read)
	if !ok {
		return false // not acked: watermill-sql delivers it again
	}
	defer s.release(key, settled)
	// The handler gets a copy, so that an ack is checked against the
	// deadline before watermill-sql sees it: once its wait ended (at the
	// deadline, its context ends too), the ack is not recorded. Its
	// context ends with ctx too (the subscription stops), while the read's
	// goes on until the copy is settled.
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
// deadline: watermill-sql stopped waiting for the ack. Its Err says so
// only most of the time (watermill-sql's own cancel races the deadline and
// may end it as Canceled); a context that ended before its deadline was
// ended by a stop, which is no late ack. (The check and watermill-sql's
// wait are not atomic: an ack a moment before the deadline may still be
// dropped by watermill-sql and not counted here; the message is then
// delivered again, uncounted, as at least once allows.)
func pastDeadline(read context.Context) bool {
	deadline, ok := read.Deadline()
	return read.Err() != nil && ok && !time.Now().Before(deadline)
}

// take marks the delivery of key as being handled once no other delivery
// of it is; ok is false when read, this delivery's context, ended first
// (or the subscription stopped). Release it when it is settled.
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

// returns counts the deliveries of a message that ended unsettled in this
// process: nacked, or acked after their deadline.
type returns struct {
	n    int
	last time.Time
}

// returnCount is how many deliveries of key ended unsettled, the last of
// them less than lateMemory deadlines ago: the copies carry it as
// metadata.DeliveryCount, the poison-loop guard's count of them.
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

// lateLimit bounds the returns a subscriber remembers, and lateMemory
// how long, in ack deadlines: the copies of a message acked late come
// within a deadline or two of the ack. A count is not forgotten at an ack
// in time: on PostgreSQL another subscription of the group may have read a
// copy before that ack committed (or instead of it), and that copy must
// carry the count; a replay of the message from the error topic comes later
// and starts from zero.
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
// closed.
//
// It first lets each subscription settle what it holds: a message handed
// out and acked meanwhile is passed on, and its ack committed, for at most
// closeGrace; then it stops them. Ending watermill-sql's reading at once
// would roll back the acks made just before Close, and a stopping bus,
// which closes its subscribers once its handlers have finished, would
// handle those messages again.
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

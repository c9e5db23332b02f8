package outbox

import (
	"context"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/drain"
)

// stoppingSubscriber is the relay's watermill-sql subscriber as the
// relay's router sees it: a stop lets the batch being relayed end well.
//
// watermill-sql reads a batch (up to 100 rows) in one transaction, hands
// its messages to the router one at a time, and records the ones
// published (the consumer group's offset on PostgreSQL, the acked column
// on MySQL) in that transaction after the last: a stop that ends the
// subscription's context rolls the transaction back, and every message
// of the batch already published is relayed again by the next relay. The
// router ends that context as soon as it closes (and the relay's Run
// context ends it too), so even a clean stop would have up to a batch
// relayed twice.
//
// So the subscription runs on a context the stop does not end. A stop
// (the router's context ending, or Close) hands the router no more
// messages, waits for the publish in flight, and closes watermill-sql's
// subscriber, which records the batch's published messages, commits and
// returns. Only after timeout (Config.StopTimeout) is the context ended,
// cutting the publish and the batch's transaction short (its published
// messages are then relayed again).
type stoppingSubscriber struct {
	sub *wsql.Subscriber
	// drain counts the messages handed to the router, not yet acked or
	// nacked; its cut ends the subscriptions' contexts: a publish still
	// in flight and the batch's transaction are cut short, and the
	// batch's published messages are relayed again by the next relay.
	drain *drain.Drain
	done  chan struct{} // closed when the stop is over
}

func newStoppingSubscriber(sub *wsql.Subscriber, timeout time.Duration) *stoppingSubscriber {
	return &stoppingSubscriber{sub: sub, drain: drain.New(timeout), done: make(chan struct{})}
}

// Subscribe subscribes on a context that only the stop's cut ends; ctx
// ending begins the stop. A ctx already done fails, as watermill-sql's
// Subscribe does: the relay was stopped while it started.
func (s *stoppingSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.drain.Stopped() {
		return nil, wsql.ErrSubscriberClosed
	}
	subCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(s.drain.Context(), cancel)
	in, err := s.sub.Subscribe(subCtx, topic)
	if err != nil {
		cancel()
		return nil, err
	}
	context.AfterFunc(ctx, func() { go s.Close() })
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		// Until watermill-sql's subscription ends. A message not handed
		// (the stop began) is given up by watermill-sql when its
		// subscriber closes, and stays in the outbox.
		for msg := range in {
			s.hand(msg, out)
		}
	}()
	return out, nil
}

// hand gives msg to the router unless the stop began, and waits until
// it is acked or nacked (watermill-sql hands out no other meanwhile), or
// the stop cuts it.
func (s *stoppingSubscriber) hand(msg *message.Message, out chan<- *message.Message) {
	if !s.drain.TryAdd() {
		return
	}
	defer s.drain.Done()
	select {
	case out <- msg:
	case <-s.drain.Stopping():
		return
	}
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-s.drain.Context().Done():
	}
}

// Close stops the subscriber, once, and returns when the stop is over:
// no message is handed to the router any more; the one in flight is
// published and watermill-sql's subscriber closed, committing the
// published messages of its batch, within timeout; then whatever is left
// is cut. The router calls it when it closes.
func (s *stoppingSubscriber) Close() error {
	if s.drain.Stop() {
		s.drain.Wait(s.drain.Context().Done())
		// watermill-sql's Close makes its subscription give up the
		// message it waits to hand out, record the ones published, commit
		// and return; the cut ends its context if that takes too long.
		_ = s.sub.Close()
		s.drain.Wait(nil)
		s.drain.Cut()
		close(s.done)
	}
	<-s.done
	return nil
}

package outbox

import (
	"context"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/drain"
)

// stoppingSubscriber is the relay's watermill-sql subscriber as its router
// sees it: a stop lets the batch being relayed end well.
//
// watermill-sql reads a batch (up to 100 rows) in one transaction and
// records the ones published in it after the last: ending the
// subscription's context rolls it back, and the batch's published
// messages are relayed again. The router ends that context as it closes,
// so the subscription runs on a context of its own. A stop hands out no
// more messages, waits for the publish in flight and closes watermill-sql's
// subscriber, which commits; only after timeout (Config.StopTimeout) is
// the context ended.
type stoppingSubscriber struct {
	sub *wsql.Subscriber
	// drain counts the messages handed to the router and not yet settled;
	// its cut ends the subscriptions' contexts.
	drain *drain.Drain
	done  chan struct{} // closed when the stop is over
}

func newStoppingSubscriber(sub *wsql.Subscriber, timeout time.Duration) *stoppingSubscriber {
	return &stoppingSubscriber{sub: sub, drain: drain.New(timeout), done: make(chan struct{})}
}

// Subscribe subscribes on a context that only the stop's cut ends; ctx
// ending begins the stop. A ctx already done fails, as watermill-sql's.
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
		// A message not handed out (the stop began) stays in the outbox.
		for msg := range in {
			s.hand(msg, out)
		}
	}()
	return out, nil
}

// hand gives msg to the router unless the stop began, and waits until it
// is settled or the stop cuts it.
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

// Close stops the subscriber, once, and returns when the stop is over (see
// stoppingSubscriber). The router calls it when it closes.
func (s *stoppingSubscriber) Close() error {
	if s.drain.Stop() {
		s.drain.Wait(s.drain.Context().Done())
		// watermill-sql's Close records the ones published and commits;
		// the cut ends its context if that takes too long.
		_ = s.sub.Close()
		s.drain.Wait(nil)
		s.drain.Cut()
		close(s.done)
	}
	<-s.done
	return nil
}

package bus

import (
	"context"
	"fmt"
	"sync"
)

// batchSends ties the messages of one HandleBatch call: what fn sent is
// the first message's to dispatch after the commit, so the others are
// settled only once that dispatch is done, and fail with it.
type batchSends struct {
	carrier *incoming // the first message of the call
	ids     []string  // every message of the call, for the error line

	once sync.Once
	done chan struct{}
	err  error
}

// tieSends ties the messages of a call, ms in the order fn got them.
func tieSends[T any](ms []*batchMember[T]) {
	if len(ms) < 2 || ms[0].in == nil {
		return
	}
	s := &batchSends{carrier: ms[0].in, done: make(chan struct{})}
	for _, m := range ms {
		s.ids = append(s.ids, m.msg.UUID)
		if m.in != nil {
			m.in.sends = s
		}
	}
}

// carriedBy reports whether in carries the sends of s's call.
func (s *batchSends) carriedBy(in *incoming) bool { return s != nil && s.carrier == in }

// finish records the outcome of the carrier's attempt.
func (s *batchSends) finish(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// wait returns once the carrier's attempt has ended, with its error, or
// when ctx ends.
func (s *batchSends) wait(ctx context.Context) error {
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("bus: the messages its batch handler's call sent were not dispatched (they go with message %s): %w", s.carrier.msg.UUID, s.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bus: the message's context ended before its batch handler's call dispatched what it sent: %w", context.Cause(ctx))
	}
}

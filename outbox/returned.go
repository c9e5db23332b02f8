package outbox

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/uow"
)

// Returned is a middleware for plain Watermill handlers: the messages a
// handler returns are written to the outbox for topic through the unit of
// work's transaction (it must run inside the unit-of-work middleware)
// instead of going to the router's publisher.
func Returned(o *Outbox, topic string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil || len(out) == 0 {
				return out, err
			}
			ctx := msg.Context()
			tx := uow.Tx(ctx)
			if tx == nil {
				return nil, uow.ErrNoUnit
			}
			return nil, o.Publish(ctx, tx, topic, out...)
		}
	}
}

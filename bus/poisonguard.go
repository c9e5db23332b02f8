package bus

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// deliveryCounter is the poison-loop guard's count of a message's unsettled
// deliveries where the transport does not count them (counterFor); the
// transport's own count (metadata.DeliveryCount), where a delivery carries
// one, is a floor.
type deliveryCounter interface {
	// previous returns the unsettled deliveries of msg to the group before
	// this one, counting this one first where it must (counted). Call
	// release when the delivery ends.
	previous(msg *message.Message, group, consumer string) (n int, counted bool, release func(), err error)
	// ended records how a delivery ended: nacked, or settled (moved or not).
	ended(msg *message.Message, group, consumer string, counted, nacked, moved bool) error
}

// counterFor chooses the count of a handler's deliveries: none where each
// redelivery carries the transport's count (quorum queues); the database's
// (poisonCount) where the transport marks possible redeliveries and the
// bus has Config.DB, counting crash loops too; else this process's
// (nackCount), which does not (docs/guarantees.md).
func (b *Bus) counterFor(caps transport.Capabilities) deliveryCounter {
	switch {
	case caps.CountsDeliveries:
		return countedByTransport{}
	case caps.MarksRedeliveries && b.redeliveries != nil:
		return b.redeliveries
	default:
		return &b.nacks
	}
}

// delayedRetryCounter counts delayed retries' runs in the database.
func (b *Bus) delayedRetryCounter() deliveryCounter {
	if b.redeliveries != nil {
		return b.redeliveries
	}
	return &b.nacks
}

// countedByTransport is for a transport that counts every redelivery.
type countedByTransport struct{}

func (countedByTransport) previous(*message.Message, string, string) (int, bool, func(), error) {
	return 0, false, func() {}, nil
}

func (countedByTransport) ended(*message.Message, string, string, bool, bool, bool) error { return nil }

// guarded wraps a delivery with the poison-loop guard: a message delivered
// Config.MaxDeliveries times without being settled goes to the error topic
// on its next delivery (handled as usual while the error topic refuses it).
// A redelivery is handled alone, never in a batch: batched with the one
// that kills its process, innocent ones would reach MaxDeliveries with it.
func (b *Bus) guarded(handler, topic string, count deliveryCounter, delivery message.HandlerFunc) func(*message.Message) error {
	group, consumer := b.group(handler), b.consumer(handler)
	return func(msg *message.Message) error {
		n, counted, release, err := count.previous(msg, group, consumer)
		defer release()
		if errors.Is(err, errStopping) {
			return err
		} else if err != nil {
			b.cfg.Logger.Warn("bus: the poison-loop guard could not count a redelivery; only its transport's count holds",
				"handler", handler, "message_id", msg.UUID, "error", err)
		}
		if c, err := strconv.Atoi(msg.Metadata.Get(metadata.DeliveryCount)); err == nil && c > n {
			n = c // the transport's count is a floor: a broker may count what the handler's count does not
		}
		if n >= b.cfg.MaxDeliveries {
			reason := fmt.Errorf("bus: delivered %d times without being handled (Config.MaxDeliveries %d): moved aside so that the messages behind it are handled", n, b.cfg.MaxDeliveries)
			if err := b.moveToErrorTopic(handler, topic, msg, 0, reason); err == nil {
				b.ended(handler, count, msg, group, consumer, counted, false, true)
				return nil
			}
		}
		if counted && n >= 2 {
			b.cfg.Logger.Warn("bus: a message came back again without being settled (nacked, or its process ended while handling it); it is handled alone, and goes to the error topic after Config.MaxDeliveries",
				"handler", handler, "message_id", msg.UUID, "deliveries", n, "max_deliveries", b.cfg.MaxDeliveries)
		}
		if n > 0 || msg.Metadata.Get(metadata.Redelivered) != "" {
			msg.SetContext(uow.Alone(msg.Context()))
		}
		_, err = delivery(msg)
		b.ended(handler, count, msg, group, consumer, counted, err != nil, false)
		return err
	}
}

// ended tells count how a delivery ended; a count it could not forget is
// kept until cleanup.
func (b *Bus) ended(handler string, count deliveryCounter, msg *message.Message, group, consumer string, counted, nacked, moved bool) {
	if err := count.ended(msg, group, consumer, counted, nacked, moved); err != nil {
		b.cfg.Logger.Warn("bus: "+err.Error(), "handler", handler)
	}
}

// redelivery reports whether msg may be a redelivery to group; such a
// message is handled alone (guarded), and a batch does not wait for it.
func (b *Bus) redelivery(group string, msg *message.Message) bool {
	return msg.Metadata.Get(metadata.Redelivered) != "" || msg.Metadata.Get(metadata.DeliveryCount) != "" ||
		b.nacks.seen(group, msg.UUID)
}

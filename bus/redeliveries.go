package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/metadata"
)

// redeliveries counts in the database, per consumer and message ID, the
// redeliveries of messages whose transport does not count deliveries
// itself but says that a delivery is, or may be, a redelivery
// (metadata.Redelivered: RabbitMQ's classic queues, the SQL transport's
// first read, each run of a delayed retry). The poison-loop guard's own count lives
// in the process; a message whose handling kills the process (out of
// memory, a fatal error in C code, a watchdog's SIGKILL) would be
// delivered to each restarted process forever (docs/guarantees.md). Only
// these deliveries pay: one transaction (upsert and read) before the
// handler runs, after a read on RabbitMQ's classic queues (looped: one
// that came back before waits for the bus's slot), and a delete once the
// message is settled; a first delivery costs nothing.
type redeliveries struct {
	db    *gorm.DB
	d     dialect.Dialect
	stmts dialect.DeliveriesStatements
}

// newRedeliveries returns the counter of db; nil without a database (the
// guard then counts what this process saw only).
func newRedeliveries(db *gorm.DB) (*redeliveries, error) {
	if db == nil {
		return nil, nil
	}
	d, err := dialects.Of(db)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	stmts, err := d.Deliveries(dialect.DeliveriesTableDefault)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	return &redeliveries{db: db, d: d, stmts: stmts}, nil
}

// counts reports whether a delivery of msg is counted in the database: one
// that may repeat a delivery that ended with its process, which its
// transport did not count.
func (r *redeliveries) counts(msg *message.Message) bool {
	if r == nil || msg.Metadata.Get(metadata.DeliveryCount) != "" {
		return false
	}
	v := msg.Metadata.Get(metadata.Redelivered)
	return v == metadata.RedeliveredYes || v == metadata.RedeliveredFirstRead
}

// count adds this delivery of msg to consumer's count and returns the
// deliveries before it that were not settled (a settled message is acked,
// and its count forgotten). A redelivery's count is that number: the
// first delivery, which was not counted, and the redeliveries before this
// one. A first read (the SQL transport) may be a message's first delivery:
// its count less one, so that an innocent message is never counted early
// (a message that ended a process it did not reach first counts one less).
func (r *redeliveries) count(ctx context.Context, consumer string, msg *message.Message, now time.Time) (int, error) {
	var n int
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(r.stmts.Count, consumer, msg.UUID, r.d.Time(now)).Error; err != nil {
			return err
		}
		return tx.Raw(r.stmts.Read, consumer, msg.UUID).Row().Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("bus: count the redelivery of message %s in %s: %w", msg.UUID, dialect.DeliveriesTableDefault, err)
	}
	if msg.Metadata.Get(metadata.Redelivered) == metadata.RedeliveredFirstRead {
		n--
	}
	return n, nil
}

// looped reports whether a count of msg is stored: it came back before,
// and was not settled since (a crash loop, or a nack loop). An error
// reads as no: count says it.
func (r *redeliveries) looped(ctx context.Context, consumer string, msg *message.Message) bool {
	var n int
	err := r.db.WithContext(ctx).Raw(r.stmts.Read, consumer, msg.UUID).Row().Scan(&n)
	return err == nil && n > 0
}

// forget deletes the count of a message that was settled.
func (r *redeliveries) forget(ctx context.Context, consumer, id string) error {
	if err := r.db.WithContext(ctx).Exec(r.stmts.Forget, consumer, id).Error; err != nil {
		return fmt.Errorf("bus: forget the redelivery count of message %s: %w", id, err)
	}
	return nil
}

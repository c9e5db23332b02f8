package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/metadata"
)

// poisonCount counts in postroom_deliveries the deliveries its transport
// marks metadata.Redelivered, so a message that kills its process reaches
// the error topic after Config.MaxDeliveries. One that came back unsettled
// before (looped) waits for the bus's one slot and is counted in its turn,
// so a crash in its run counts against it alone: an innocent message is
// counted at most twice.
type poisonCount struct {
	db       *gorm.DB
	d        dialect.Dialect
	stmts    dialect.DeliveriesStatements
	now      func() time.Time
	slot     chan struct{} // held by the looped delivery being handled
	stopping <-chan struct{}

	mu     sync.Mutex
	stored map[string]bool // consumer and message ID of the counts this process wrote, until settled
}

// newPoisonCount returns the counter of db; nil without a database.
func newPoisonCount(db *gorm.DB, now func() time.Time, stopping <-chan struct{}) (*poisonCount, error) {
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
	return &poisonCount{db: db, d: d, stmts: stmts, now: now, slot: make(chan struct{}, 1), stopping: stopping, stored: map[string]bool{}}, nil
}

// previous counts a marked delivery and returns the unsettled ones before it.
func (r *poisonCount) previous(msg *message.Message, _, consumer string) (n int, counted bool, release func(), err error) {
	release = func() {}
	mark := msg.Metadata.Get(metadata.Redelivered)
	if mark != metadata.RedeliveredYes && mark != metadata.RedeliveredFirstRead {
		return 0, false, release, nil
	}
	ctx := msg.Context()
	if mark == metadata.RedeliveredYes && r.looped(ctx, consumer, msg) {
		select {
		case r.slot <- struct{}{}:
			release = func() { <-r.slot }
		case <-r.stopping:
			return 0, false, release, errStopping
		case <-ctx.Done(): // its delivery ended (a lost connection): given back as at a stop
			return 0, false, release, errStopping
		}
	}
	n, err = r.count(ctx, consumer, msg)
	if err == nil {
		r.mu.Lock()
		if len(r.stored) >= storedLimit {
			clear(r.stored) // rows left are purged by cleanup
		}
		r.stored[consumer+"\x00"+msg.UUID] = true
		r.mu.Unlock()
	}
	return n, err == nil, release, err
}

// storedLimit bounds the counts a process remembers having written.
const storedLimit = 10_000

// count adds this delivery of msg to consumer's count and returns the
// unsettled deliveries before it: for a redelivery the stored count (the
// uncounted first delivery included); for a first read (the SQL transport),
// which may be a first delivery, one less, so none is counted early.
func (r *poisonCount) count(ctx context.Context, consumer string, msg *message.Message) (int, error) {
	var n int
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(r.stmts.Count, consumer, msg.UUID, r.d.Time(r.now())).Error; err != nil {
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

// looped reports whether a count of msg is stored; an error reads as no.
func (r *poisonCount) looped(ctx context.Context, consumer string, msg *message.Message) bool {
	var n int
	err := r.db.WithContext(ctx).Raw(r.stmts.Read, consumer, msg.UUID).Row().Scan(&n)
	return err == nil && n > 0
}

// ended forgets the count of a message settled after a delivery counted
// here (this one, or an earlier one in this process) or by its transport
// (which may follow one counted here), or moved aside (a replay starts
// again). A nacked delivery keeps it.
func (r *poisonCount) ended(msg *message.Message, _, consumer string, counted, nacked, moved bool) error {
	if nacked {
		return nil
	}
	key := consumer + "\x00" + msg.UUID
	r.mu.Lock()
	wrote := r.stored[key]
	delete(r.stored, key)
	r.mu.Unlock()
	if !counted && !wrote && !moved && msg.Metadata.Get(metadata.DeliveryCount) == "" {
		return nil
	}
	// Also when the message's context ended with the settling (a stop).
	ctx := context.WithoutCancel(msg.Context())
	if err := r.db.WithContext(ctx).Exec(r.stmts.Forget, consumer, msg.UUID).Error; err != nil {
		return fmt.Errorf("bus: forget the redelivery count of message %s: %w", msg.UUID, err)
	}
	return nil
}

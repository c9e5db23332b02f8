package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/uow"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
)

// Batch claims the keys of many messages in one statement, for
// bus.HandleBatch, in the unit of work of the context given. Transactional
// mode only, without a checksum.
type Batch struct {
	cfg       Config
	d         dialect.Dialect
	insert    string // one key
	countDone string // InboxCountDone
	left      leftovers
}

// Claim is one message's key in a batch.
type Claim struct {
	Consumer string
	Key      Key
	Type     string
}

// CompareClaims orders claims by key, the order ClaimAll inserts them in:
// transactions taking keys in one order wait instead of deadlocking.
func CompareClaims(a, b Claim) int {
	return cmp.Or(cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(a.Key.Source, b.Key.Source), cmp.Compare(a.Key.MessageID, b.Key.MessageID))
}

// NewBatch returns the batch claimer of cfg.
func NewBatch(cfg Config) (*Batch, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Mode != Transactional || cfg.Checksum {
		return nil, errors.New("inbox: a batch claims keys in the Transactional mode, without checksums")
	}
	d, err := dialects.Of(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &Batch{cfg: cfg, d: d, insert: d.Native(d.InboxInsert(cfg.Table)), countDone: d.Native(d.InboxCountDone(cfg.Table)),
		left: newLeftovers(cfg, d)}, nil
}

// KeyOf returns msg's claim, or the unrecoverable error of a bad key.
func (b *Batch) KeyOf(msg *message.Message) (Claim, error) {
	consumer, key, err := b.cfg.keyOf(msg)
	if err != nil {
		return Claim{}, err
	}
	return Claim{Consumer: consumer, Key: key, Type: msg.Metadata.Get(metadata.MessageType)}, nil
}

// ClaimAll inserts the claims' keys in the unit of work in ctx, in
// CompareClaims order, and reports which are new (a repeated key at most
// once): in one statement when every key is, else one per key.
func (b *Batch) ClaimAll(ctx context.Context, claims []Claim) (fresh []bool, err error) {
	fresh = make([]bool, len(claims))
	order := make([]int, 0, len(claims))
	type key struct {
		consumer string
		Key
	}
	seen := make(map[key]bool, len(claims))
	for i, c := range claims {
		if k := (key{c.Consumer, c.Key}); !seen[k] { // a later copy stays a duplicate, whatever its type
			seen[k] = true
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(i, j int) int { return CompareClaims(claims[i], claims[j]) })
	if len(order) == 0 {
		return fresh, nil
	}
	now := b.d.Time(b.cfg.Now())
	args := make([]any, 0, 5*len(order))
	for _, i := range order {
		c := claims[i]
		args = append(args, c.Consumer, c.Key.Source, c.Key.MessageID, c.Type, now)
	}
	all := errors.New("inbox: not every key is new")
	err = uow.Savepoint(ctx, func(ctx context.Context) error {
		rows, err := uow.Exec(ctx, b.d.Native(b.d.InboxInsertMany(b.cfg.Table, len(order))), args...)
		if err != nil {
			return fmt.Errorf("inbox: claim keys: %w", err)
		}
		if rows != int64(len(order)) {
			return all // rolled back: each key alone tells which are new
		}
		return nil
	})
	if err == nil {
		for _, i := range order {
			fresh[i] = true
		}
		return fresh, nil
	}
	if !errors.Is(err, all) {
		return nil, err
	}
	for _, i := range order {
		if fresh[i], err = b.claim(ctx, claims[i], now); err != nil {
			return nil, err
		}
	}
	return fresh, nil
}

// Claim inserts one claim's key in the unit of work in ctx and reports
// whether it is new.
func (b *Batch) Claim(ctx context.Context, c Claim) (bool, error) {
	return b.claim(ctx, c, b.d.Time(b.cfg.Now()))
}

// claim inserts c's key, or takes a released one over; it reports whether
// it is new.
func (b *Batch) claim(ctx context.Context, c Claim, now any) (bool, error) {
	rows, err := uow.Exec(ctx, b.insert, c.Consumer, c.Key.Source, c.Key.MessageID, c.Type, now)
	if err != nil {
		return false, fmt.Errorf("inbox: claim key: %w", err)
	}
	if rows == 1 {
		return true, nil
	}
	return b.left.takeReleased(ctx, c.Consumer, c.Key)
}

// Duplicate counts c's message, skipped as a duplicate, on its row in the
// unit of work in ctx (Skipped records the metric after the commit). When
// c's key is an unsettled External claim, the message is no duplicate:
// failed is its error (an expired claim is parked). err is the
// transaction's.
func (b *Batch) Duplicate(ctx context.Context, c Claim) (failed, err error) {
	rows, err := uow.Exec(ctx, b.countDone, c.Consumer, c.Key.Source, c.Key.MessageID)
	if err != nil {
		return nil, fmt.Errorf("inbox: count duplicate: %w", err)
	}
	if rows == 1 {
		return nil, nil
	}
	claim, gone, err := b.left.readTaken(ctx, c.Consumer, c.Key)
	if err != nil || gone != nil {
		return gone, err
	}
	now := b.cfg.Now()
	failed = b.left.unsettled(claim, c.Consumer, c.Key, now)
	if failed != nil && b.left.expired(claim, now) {
		parked, err := uow.Exec(ctx, b.left.parkNative, b.left.parkArgs(claim, c.Consumer, c.Key)...)
		if err != nil {
			return nil, fmt.Errorf("inbox: park an expired claim: %w", err)
		}
		if parked == 1 {
			b.cfg.Recorder.Record(c.Consumer, metrics.Parked)
		}
	}
	return failed, nil
}

// Skipped records in the metrics and the log that c's message was skipped
// as a duplicate, once Duplicate's count has committed.
func (b *Batch) Skipped(ctx context.Context, c Claim) { b.cfg.duplicate(ctx, c.Consumer, c.Key) }

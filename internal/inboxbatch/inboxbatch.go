// Package inboxbatch hands the inbox's batch claimer to the bus's batch
// handlers (bus.HandleBatch). Package middleware/inbox implements it with
// its own unexported code and sets [New] when it is initialised; the bus
// imports that package, so New is set wherever the bus runs.
package inboxbatch

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/metrics"
)

// Claim is one message's key in a batch.
type Claim struct {
	Consumer  string
	Source    string
	MessageID string
	Type      string
}

// Compare orders claims by key: the order Batch.ClaimAll inserts them in.
// Statements on many keys of one transaction take them in this order, so
// that two transactions with keys in common wait for each other instead of
// deadlocking.
func Compare(a, b Claim) int {
	return cmp.Or(cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(a.Source, b.Source), cmp.Compare(a.MessageID, b.MessageID))
}

// Batch claims the keys of many messages at once, in one statement. Its
// statements run in the unit of work of the context they are given. Only
// the inbox's Transactional mode, without a checksum.
type Batch interface {
	// KeyOf returns msg's claim, or the unrecoverable error of a bad key.
	KeyOf(msg *message.Message) (Claim, error)
	// ClaimAll inserts the claims' keys in the unit of work in ctx and
	// reports which are new: in one statement when every key is (the
	// usual case), one statement per key when some are not. A key that
	// appears twice in claims is new at most once. Keys are inserted in
	// the order of Compare, whatever the order of claims.
	ClaimAll(ctx context.Context, claims []Claim) (fresh []bool, err error)
	// Claim inserts one claim's key in the unit of work in ctx and
	// reports whether it is new.
	Claim(ctx context.Context, c Claim) (bool, error)
	// Duplicate counts c's message, skipped as a duplicate, on its row, in
	// the unit of work in ctx. When c's key is an unsettled claim of the
	// external-effects mode the message is no duplicate: failed is its
	// error. err is the transaction's.
	Duplicate(ctx context.Context, c Claim) (failed, err error)
	// Skipped records in the metrics and the log that c's message was
	// skipped as a duplicate, once Duplicate's count has committed.
	Skipped(ctx context.Context, c Claim)
}

// Config configures a Batch: the fields of the inbox's Config it takes.
type Config struct {
	DB       *gorm.DB
	Consumer string
	// Key takes the source and message ID from a message. Defaults to the
	// inbox's DefaultKey.
	Key      func(msg *message.Message) (source, messageID string, err error)
	Recorder metrics.Recorder
	Logger   *slog.Logger
	Now      func() time.Time
}

// New returns the batch claimer of cfg. Package middleware/inbox sets it.
var New func(cfg Config) (Batch, error)

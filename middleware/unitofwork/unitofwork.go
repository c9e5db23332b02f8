package unitofwork

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/uow"
)

// Config configures the unit-of-work middleware.
type Config struct {
	// DB is the database the transaction is opened on. Required.
	DB *gorm.DB
	// BatchSize is the most messages one transaction commits. Above 1,
	// concurrent messages share a transaction, each in its own savepoint (a
	// failing handler rolls back alone), and each is acked after the
	// commit. Defaults to 1: a transaction per message.
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its
	// first. Used only when BatchSize is above 1. Defaults to 10ms.
	BatchWait time.Duration
	// InFlight, when set, returns how many messages the handler holds now
	// (not those handled in a batch of their own). While messages come one
	// at a time, a batch then commits once every message in flight has
	// joined it and run, instead of waiting BatchWait. Used only when
	// BatchSize is above 1. Defaults to nil.
	InFlight func() int
}

// New returns a middleware that runs each message in one transaction, or,
// with Config.BatchSize above 1, the messages handled at the same time in
// one transaction. It returns every problem of cfg at once.
func New(cfg Config) (message.HandlerMiddleware, error) {
	return uow.New(uow.Config(cfg))
}

// Run calls h for msg inside a new transaction on db, as the middleware does.
// If msg's context already carries a unit of work, h joins it instead.
func Run(db *gorm.DB, msg *message.Message, h message.HandlerFunc) (out []*message.Message, err error) {
	return uow.Run(db, msg, h)
}

// Active reports whether ctx carries a unit of work.
func Active(ctx context.Context) bool {
	return uow.Active(ctx)
}

// Tx returns the transaction of the unit of work in ctx, bound to ctx, or
// nil when there is none. Handlers write through it so that their writes
// commit with the message.
func Tx(ctx context.Context) *gorm.DB {
	return uow.Tx(ctx)
}

// RollbackOnly marks the unit of work in ctx so that it rolls back even
// though the handler chain returns nil: the message is acked and nothing it
// wrote is kept. It does nothing when ctx carries no unit of work.
func RollbackOnly(ctx context.Context) {
	uow.RollbackOnly(ctx)
}

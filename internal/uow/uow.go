package uow

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"
)

// ErrNoDB is returned by New when Config.DB is nil.
var ErrNoDB = errors.New("unitofwork: Config.DB is nil: pass the *gorm.DB the handlers write to")

// BatchWaitDefault is the default Config.BatchWait.
const BatchWaitDefault = 10 * time.Millisecond

// Config is unitofwork.Config, whose fields it has: see there.
type Config struct {
	DB        *gorm.DB
	BatchSize int
	BatchWait time.Duration
	InFlight  func() int // not counting the messages marked with Alone
}

func (c Config) validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, ErrNoDB)
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("unitofwork: Config.BatchSize %d is negative", c.BatchSize))
	}
	if c.BatchWait < 0 {
		errs = append(errs, fmt.Errorf("unitofwork: Config.BatchWait %s is negative", c.BatchWait))
	}
	return errors.Join(errs...)
}

type unitKey struct{}

// unit is one message's transaction. It begins on first use, so a handler
// that never writes holds no connection, and works on the driver's
// transaction directly: the gorm handle is built only when a handler calls
// Tx, so the inbox and stale statements skip gorm's statement cloning.
type unit struct {
	db           *gorm.DB
	ctx          context.Context
	mu           sync.Mutex
	conn         gorm.ConnPool // the transaction, once begun
	err          error         // a failed BEGIN
	cancel       context.CancelFunc
	tx           *gorm.DB // the gorm handle on conn for txCtx, built by handle
	txCtx        context.Context
	rollbackOnly bool

	// In a batch: the batch's transaction, and this member's savepoint in it.
	parent    *unit
	savepoint string
	after     []statement // run once the savepoint is rolled back (AfterRollback)

	// On PostgreSQL a member's savepoint is released with the next SAVEPOINT
	// or before COMMIT: pending (on the batch's unit) is the member to
	// release; late (on the member) a failed release, which fails its message.
	releaseLater bool
	pending      *unit
	late         error

	broken error // on a Collector's batch unit: a savepoint broke the transaction
}

type statement struct {
	query string
	args  []any
}

// begin begins the transaction on first use and returns it, or the error
// of a BEGIN that failed. Call with mu held.
func (u *unit) begin() (gorm.ConnPool, error) {
	if u.conn != nil || u.err != nil {
		return u.conn, u.err
	}
	if u.parent != nil {
		return u.beginSavepoint()
	}
	ctx := u.ctx
	if d := u.db.DefaultTransactionTimeout; d > 0 {
		if _, ok := ctx.Deadline(); !ok {
			ctx, u.cancel = context.WithTimeout(ctx, d)
		}
	}
	switch beginner := u.db.Statement.ConnPool.(type) {
	case gorm.TxBeginner:
		u.conn, u.err = beginner.BeginTx(ctx, nil)
	case gorm.ConnPoolBeginner:
		u.conn, u.err = beginner.BeginTx(ctx, nil)
	default:
		u.err = gorm.ErrInvalidTransaction
	}
	if u.err != nil {
		u.conn = nil
	}
	return u.conn, u.err
}

// handle returns the gorm handle on the transaction bound to ctx (a failed
// BEGIN as its Error, as gorm's Begin does). The last handle is reused for
// the same ctx, so gorm's statement is cloned once per message.
func (u *unit) handle(ctx context.Context) *gorm.DB {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tx == nil || u.txCtx != ctx {
		conn, err := u.begin()
		tx := u.db.Session(&gorm.Session{Context: ctx, NewDB: true})
		if err != nil {
			_ = tx.AddError(err)
		} else {
			tx.Statement.ConnPool = conn
		}
		u.tx, u.txCtx = tx, ctx
	}
	return u.tx
}

// end commits the transaction if it began, or rolls it back. A failed
// BEGIN fails the commit, even if the handler ignored its error.
func (u *unit) end(commit bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	conn, beginErr, cancel := u.conn, u.err, u.cancel
	u.conn, u.err, u.cancel, u.tx, u.txCtx = nil, nil, nil, nil, nil
	if cancel != nil {
		defer cancel()
	}
	switch {
	case beginErr != nil:
		if commit {
			return fmt.Errorf("unitofwork: begin: %w", beginErr)
		}
		return nil
	case conn == nil:
		return nil
	}
	if u.parent != nil {
		return u.endSavepoint(conn, commit)
	}
	committer, ok := conn.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	if !commit {
		return committer.Rollback()
	}
	if err := committer.Commit(); err != nil {
		return fmt.Errorf("unitofwork: commit: %w", err)
	}
	return nil
}

// New returns a middleware that runs each message in one transaction, or,
// with Config.BatchSize above 1, the messages handled at the same time in
// one transaction.
func New(cfg Config) (message.HandlerMiddleware, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.BatchSize > 1 {
		b := &batcher{db: cfg.DB, size: cfg.BatchSize, wait: cmp.Or(cfg.BatchWait, BatchWaitDefault), inFlight: cfg.InFlight, lastSingle: true}
		return func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				return b.run(msg, h)
			}
		}, nil
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			return Run(cfg.DB, msg, h)
		}
	}, nil
}

// Run calls h for msg inside a new transaction on db, as the middleware does.
// If msg's context already carries a unit of work, h joins it instead.
func Run(db *gorm.DB, msg *message.Message, h message.HandlerFunc) (out []*message.Message, err error) {
	parent := msg.Context()
	if Active(parent) {
		return h(msg)
	}
	u := &unit{db: db, ctx: parent}
	msg.SetContext(context.WithValue(parent, unitKey{}, u))
	done := false
	defer func() {
		msg.SetContext(parent)
		if !done {
			_ = u.end(false) // on error, rollback-only and panic alike
		}
	}()
	out, err = h(msg)
	if err != nil || u.rollbackOnly {
		return nil, err
	}
	done = true
	if err := u.end(true); err != nil {
		return nil, err
	}
	return out, nil
}

// Active reports whether ctx carries a unit of work.
func Active(ctx context.Context) bool {
	_, ok := ctx.Value(unitKey{}).(*unit)
	return ok
}

// Tx returns the transaction of the unit of work in ctx, bound to ctx, or
// nil when there is none. Handlers write through it so that their writes
// commit with the message.
func Tx(ctx context.Context) *gorm.DB {
	u, ok := ctx.Value(unitKey{}).(*unit)
	if !ok {
		return nil
	}
	return u.handle(ctx)
}

// RollbackOnly marks the unit of work in ctx so that it rolls back even
// though the handler chain returns nil: the message is acked and nothing it
// wrote is kept. It does nothing when ctx carries no unit of work.
func RollbackOnly(ctx context.Context) {
	if u, ok := ctx.Value(unitKey{}).(*unit); ok {
		u.rollbackOnly = true
	}
}

// IsRollbackOnly reports whether the unit of work in ctx was marked with
// RollbackOnly (a middleware inside decided the message is not handled).
func IsRollbackOnly(ctx context.Context) bool {
	u, ok := ctx.Value(unitKey{}).(*unit)
	return ok && u.rollbackOnly
}

// ErrNoUnit is returned by Exec when ctx carries no unit of work.
var ErrNoUnit = errors.New("unitofwork: no unit of work in the context: wrap the handler with the unit-of-work middleware")

// QueryRow runs one query in the transaction of the unit of work in ctx,
// straight on the driver, as Exec does, and returns its first row.
func QueryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	conn, err := begun(ctx)
	if err != nil {
		return nil, err
	}
	return conn.QueryRowContext(ctx, query, args...), nil
}

// Exec runs one statement in the transaction of the unit of work in ctx
// straight on the driver, in its own placeholders ($1 on PostgreSQL, ?
// elsewhere), and returns the number of rows affected.
func Exec(ctx context.Context, query string, args ...any) (int64, error) {
	conn, err := begun(ctx)
	if err != nil {
		return 0, err
	}
	res, err := conn.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// begun returns the transaction of the unit of work in ctx, begun on first use.
func begun(ctx context.Context) (gorm.ConnPool, error) {
	u, ok := ctx.Value(unitKey{}).(*unit)
	if !ok {
		return nil, ErrNoUnit
	}
	u.mu.Lock()
	conn, err := u.begin()
	u.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("unitofwork: begin: %w", err)
	}
	return conn, nil
}

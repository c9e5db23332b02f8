package console

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/metadata"
)

// errorQueue is the error topic as the failed-messages pages use it: on
// RabbitMQ (*amqpqueue.Queue) or on the SQL transport (*sqlErrorQueue).
type errorQueue interface {
	// Browse calls visit for up to limit messages, oldest first; one that
	// visit takes leaves the error topic (on RabbitMQ at once, on the SQL
	// transport when Browse commits).
	Browse(ctx context.Context, limit int, visit func(*message.Message) (take bool, err error)) error
	// Replay sends msg back to the handler that failed, alone, and
	// returns where to.
	Replay(ctx context.Context, msg *message.Message) (string, error)
	// DeliveryLimitWarning says what is wrong with the error queue's
	// delivery limit, or "" (always on the SQL transport).
	DeliveryLimitWarning() string
}

// sqlErrorQueue is the SQL transport's error topic, the table
// "watermill_<error topic>". A replay goes through the delayed table, due
// now, for the failing handler's group alone, and leaves the error topic
// in the same transaction.
type sqlErrorQueue struct {
	db      *gorm.DB
	d       dialect.Dialect
	stmts   dialect.ErrorTopicStatements
	delayed dialect.DelayedStatements
	now     func() time.Time

	tx *gorm.DB // Browse's transaction, which Replay writes in
}

// openSQLErrors returns the error topic's table in db, or an error if none.
func openSQLErrors(ctx context.Context, db *gorm.DB, topic, delayedTable string, now func() time.Time) (*sqlErrorQueue, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, err
	}
	stmts, err := d.ErrorTopic(topic)
	if err != nil {
		return nil, err
	}
	delayed, err := d.Delayed(delayedTable)
	if err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Exec(stmts.Exists).Error; err != nil {
		return nil, fmt.Errorf("console: no table of the error topic %s in the database: %w", topic, err)
	}
	return &sqlErrorQueue{db: db, d: d, stmts: stmts, delayed: delayed, now: now}, nil
}

type errorRow struct {
	offset   int64
	uuid     string
	payload  []byte
	metadata []byte
}

// Browse reads up to limit rows in one transaction, locked against
// another console's action on them, and deletes the rows taken.
func (q *sqlErrorQueue) Browse(ctx context.Context, limit int, visit func(*message.Message) (bool, error)) error {
	return q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows, err := tx.Raw(q.stmts.List, limit).Rows()
		if err != nil {
			return fmt.Errorf("console: read the error topic: %w", err)
		}
		var list []errorRow
		for rows.Next() {
			var r errorRow
			if err := rows.Scan(&r.offset, &r.uuid, &r.payload, &r.metadata); err != nil {
				rows.Close()
				return fmt.Errorf("console: read the error topic: %w", err)
			}
			list = append(list, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		q.tx = tx
		defer func() { q.tx = nil }()
		for _, r := range list {
			msg := message.NewMessage(r.uuid, r.payload)
			if msg.Metadata, err = dialect.ForeignMetadata(r.metadata); err != nil {
				msg.Metadata = message.Metadata{metadata.TransportError: "console: " + err.Error()}
			}
			take, err := visit(msg)
			if err != nil {
				return err
			}
			if take {
				if err := tx.Exec(q.stmts.Delete, r.offset).Error; err != nil {
					return fmt.Errorf("console: remove %s from the error topic: %w", r.uuid, err)
				}
			}
		}
		return nil
	})
}

// DeliveryLimitWarning is "": a table has no delivery limit.
func (q *sqlErrorQueue) DeliveryLimitWarning() string { return "" }

// Replay stores msg in the delayed table, due now, for its handler's
// group alone; it runs within Browse, in its transaction.
func (q *sqlErrorQueue) Replay(ctx context.Context, msg *message.Message) (string, error) {
	if q.tx == nil {
		return "", fmt.Errorf("console: replay %s outside a browse", msg.UUID)
	}
	topic, group, out, err := amqpqueue.ReplayCopy(msg)
	if err != nil {
		return "", err
	}
	md, err := json.Marshal(out.Metadata)
	if err != nil {
		return "", err
	}
	now := q.now()
	if err := q.tx.WithContext(ctx).Exec(q.delayed.Insert, q.d.Time(now), topic, group, out.UUID, []byte(out.Payload), string(md), q.d.Time(now)).Error; err != nil {
		return "", fmt.Errorf("console: retry %s through the delayed table: %w (has `postroom migrate` run? a retry on the SQL transport needs the table postroom_delayed)", msg.UUID, err)
	}
	return group, nil
}

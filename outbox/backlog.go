package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/postroom/postroom/internal/dialect"
)

const relayGroup = dialect.OutboxRelayGroup

// Backlog is what the relay has not published yet.
type Backlog struct {
	// Messages committed to the outbox and not yet relayed.
	Messages int64
	// Lag is the age of the oldest of them (0 when there is none).
	Lag time.Duration
}

// Backlog reports the relay's backlog, for a gauge or an alert.
func (o *Outbox) Backlog(ctx context.Context) (Backlog, error) {
	var query string
	switch o.d {
	case dialect.Postgres:
		s := wsql.DefaultPostgreSQLSchema{}
		offsets := wsql.DefaultPostgreSQLOffsetsAdapter{}.MessagesOffsetsTable(o.cfg.Topic)
		query = `SELECT COUNT(*), COALESCE(EXTRACT(EPOCH FROM (LOCALTIMESTAMP - MIN(m.created_at))), 0)
			FROM ` + s.MessagesTable(o.cfg.Topic) + ` m LEFT JOIN ` + offsets + ` o ON o.consumer_group = $1
			WHERE o.consumer_group IS NULL OR (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked)`
	case dialect.MySQL:
		s := wsql.DefaultMySQLSchema{}
		offsets := wsql.DefaultMySQLOffsetsAdapter{}.MessagesOffsetsTable(o.cfg.Topic)
		query = "SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(m.created_at), CURRENT_TIMESTAMP) / 1000000, 0)" +
			" FROM " + s.MessagesTable(o.cfg.Topic) + " m LEFT JOIN " + offsets + " o ON o.consumer_group = ?" +
			" WHERE o.consumer_group IS NULL OR m.`offset` > o.offset_acked"
	}
	sqlDB, err := o.cfg.DB.DB()
	if err != nil {
		return Backlog{}, err
	}
	var b Backlog
	var lagSeconds sql.NullFloat64
	if err := sqlDB.QueryRowContext(ctx, query, relayGroup).Scan(&b.Messages, &lagSeconds); err != nil {
		return Backlog{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	if b.Messages > 0 {
		b.Lag = time.Duration(lagSeconds.Float64 * float64(time.Second))
	}
	return b, nil
}

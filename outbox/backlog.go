package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Backlog is what the relay has not published yet.
type Backlog struct {
	// Messages committed to the outbox and not yet relayed.
	Messages int64
	// Lag is the age of the oldest of them (0 when there is none).
	Lag time.Duration
}

// Backlog reports the relay's backlog, for a gauge or an alert.
func (o *Outbox) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var lagSeconds sql.NullFloat64
	query, args := o.d.OutboxBacklog(o.cfg.Topic)
	if err := o.cfg.DB.WithContext(ctx).Raw(query, args...).Row().Scan(&b.Messages, &lagSeconds); err != nil {
		return Backlog{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	if b.Messages > 0 {
		b.Lag = time.Duration(lagSeconds.Float64 * float64(time.Second))
	}
	return b, nil
}

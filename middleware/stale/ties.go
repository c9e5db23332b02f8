package stale

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/postroom/postroom/internal/uow"
)

// tieRepeat is how often, at most, ties of one consumer and message type
// are said again.
const tieRepeat = 10 * time.Minute

// tieKeysMax bounds the (consumer, message type) counts kept before those
// quiet for tieRepeat are dropped: producers choose message types.
const tieKeysMax = 1000

// ties warns when an update was skipped for a tie of versions, which went
// to the greater message ID, not necessarily the later update (versions of
// whole seconds tie within a second).
type ties struct {
	read   string // dialect.WatermarkRead, native
	logger *slog.Logger

	mu    sync.Mutex
	since map[tieKey]*tieCount
}

type tieKey struct{ consumer, messageType string }

type tieCount struct {
	said   time.Time // zero: never said
	unsaid int       // ties since the last warning
}

func newTies(read string, logger *slog.Logger) *ties {
	return &ties{read: read, logger: logger, since: map[tieKey]*tieCount{}}
}

// check reads the watermark that made the update stale and, for a tie,
// warns (at most every tieRepeat per key, with the count not said). A
// failed read is logged at debug; the skip stands either way.
func (t *ties) check(ctx context.Context, consumer, messageType string, v Version, messageID string, now time.Time) {
	var storedAt int64
	var storedID string
	row, err := uow.QueryRow(ctx, t.read, consumer, messageType, v.EntityID)
	if err == nil {
		err = row.Scan(&storedAt, &storedID)
	}
	if err != nil {
		t.logger.DebugContext(ctx, "stale: could not read the watermark of a skipped update to tell a tie", "consumer", consumer,
			"message_type", messageType, "entity_id", v.EntityID, "message_id", messageID, "error", err)
		return
	}
	if storedAt != v.At.UnixNano() || storedID == messageID {
		return
	}
	n, say := t.count(tieKey{consumer, messageType}, now)
	if !say {
		return
	}
	t.logger.WarnContext(ctx, "stale: an update was skipped because the applied one has the same version; "+
		"the tie goes to the greater message ID, not to the later update. If the two are different updates, "+
		"their versions lack precision (an AMQP timestamp header and RFC 3339 without fractions carry whole seconds): "+
		"send postroom-version as RFC 3339 with nanoseconds",
		"consumer", consumer, "message_type", messageType, "entity_id", v.EntityID, "version", v.At,
		"skipped_message_id", messageID, "applied_message_id", storedID, "ties_not_said_since_the_last_warning", n)
}

// count counts a tie and reports whether to say it, with the ties not said
// since the last warning.
func (t *ties) count(k tieKey, now time.Time) (unsaid int, say bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.since[k]
	if !ok {
		if len(t.since) >= tieKeysMax {
			for key, other := range t.since {
				if now.Sub(other.said) >= tieRepeat {
					delete(t.since, key) // its next tie is said at once anyway
				}
			}
		}
		c = &tieCount{}
		t.since[k] = c
	}
	if !c.said.IsZero() && now.Sub(c.said) < tieRepeat {
		c.unsaid++
		return 0, false
	}
	unsaid, c.unsaid, c.said = c.unsaid, 0, now
	return unsaid, true
}

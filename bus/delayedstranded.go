package bus

import (
	"context"
	"time"

	"github.com/postroom/postroom/internal/dialect"
)

// Delayed deliveries of other buses overdue by strandedAfter are looked
// for every strandedEvery, each target group said at most every
// strandedRepeat.
var (
	strandedAfter  = 5 * time.Minute
	strandedEvery  = time.Minute
	strandedRepeat = 10 * time.Minute
)

// strandedDelayed says when delayed deliveries of a reach or endpoint this
// bus does not publish wait overdue: a sender whose broker URL names the
// broker otherwise (localhost against 127.0.0.1), or a service that is down.
type strandedDelayed struct {
	last time.Time            // the last look
	said map[string]time.Time // by target group: when it was last said
}

// check looks for such deliveries and says them.
func (s *strandedDelayed) check(ctx context.Context, b *Bus) {
	now := b.cfg.Now()
	if !s.last.IsZero() && now.Sub(s.last) < strandedEvery {
		return
	}
	s.last = now
	d, stmts, err := b.delayedStatements(b.cfg.DB)
	if err != nil {
		return
	}
	type group struct {
		targetGroup string
		n           int64
		oldest      any
	}
	var groups []group
	rows, err := b.cfg.DB.WithContext(ctx).Raw(stmts.Stranded, d.Time(now.Add(-strandedAfter)), []string{b.delayedRelay()}).Rows()
	if err != nil {
		return // deliverDue logs the database's failures
	}
	for rows.Next() {
		var g group
		if err := rows.Scan(&g.targetGroup, &g.n, &g.oldest); err != nil {
			rows.Close()
			return
		}
		groups = append(groups, g)
	}
	if rows.Close() != nil || rows.Err() != nil {
		return
	}
	mine, _ := dialect.DelayedRelay(b.delayedRelay())
	for _, r := range groups {
		if at, ok := s.said[r.targetGroup]; ok && now.Sub(at) < strandedRepeat {
			continue
		}
		s.said[r.targetGroup] = now
		relay, _ := dialect.DelayedRelay(r.targetGroup)
		overdue := "?"
		if oldest, err := d.ParseTime(r.oldest); err == nil {
			overdue = now.Sub(oldest).Round(time.Second).String()
		}
		b.cfg.Logger.Warn("bus: delayed messages are overdue, waiting for a bus that publishes them: is one running?",
			"messages", r.n, "overdue_by", overdue, "published_by", relay, "this_bus_publishes", mine,
			"hint", "a transport's reach is its broker URL as written: localhost and 127.0.0.1 are two; `postroom delayed list` shows them")
	}
}

package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/postroom/postroom/internal/dialect"
)

// GapWait is how long a consumer group of the SQL transport waits before
// it reads past a missing offset, for an insert numbered earlier to land.
// A gap is timed from when this process first saw it, not from the row's
// created_at (another program can set it).
const GapWait = 2 * time.Second

// TransportSchema reads with orderedSchema, observing gaps through db.
func (d Dialect) TransportSchema(db *sql.DB) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	schema, offsets, err := d.MessageSchema(1)
	return orderedSchema{schema.(dialect.WideSchema), &gapClock{db: db, seen: map[string]gapSeen{}}}, offsets, err
}

// orderedSchema is the SQL transport's message schema: a group reads past
// its acked offset as watermill-sql's does, but never past a row below
// which another may still land (see transport/sql/doc.go, "Order on
// MySQL/MariaDB"): a locking read waits for an uncommitted row, and a row
// other than offset + 1 is read only once seen as the next row, with the
// same acked offset, for GapWait. One row at a time.
type orderedSchema struct {
	dialect.WideSchema
	gaps *gapClock
}

// SelectQuery reads the first row past the acked offset, by that rule.
func (s orderedSchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := params.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: params.Topic, ConsumerGroup: params.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, err
	}
	messages, offsets := messageTables(params.Topic)
	acked, row, err := s.gaps.passable(messages, offsets, params.ConsumerGroup)
	if err != nil {
		return wsql.Query{}, fmt.Errorf("observe the group's next row: %w", err)
	}
	q := "SELECT n.`offset`, n.`uuid`, n.`payload`, n.`metadata` FROM (" +
		"SELECT `offset`, `uuid`, `payload`, `metadata` FROM " + messages +
		" WHERE `offset` > (" + next.Query + ") ORDER BY `offset` ASC LIMIT 1 LOCK IN SHARE MODE) n" +
		" WHERE n.`offset` = (" + next.Query + ") + 1 OR (n.`offset` = ? AND (" + next.Query + ") = ?)"
	args := append(append([]any{}, next.Args...), next.Args...)
	args = append(args, row)
	args = append(append(args, next.Args...), acked)
	return wsql.Query{Query: q, Args: args}, nil
}

// gapClock times the gaps seen, per topic and group.
type gapClock struct {
	db *sql.DB

	mu   sync.Mutex
	seen map[string]gapSeen
}

type gapSeen struct {
	acked, next int64
	since       time.Time
}

// passable reads, without locking, the group's acked offset and the first
// row past it, and returns the pair once a gap between them was seen for
// GapWait; otherwise -1, -1, which no row matches.
func (c *gapClock) passable(messages, offsets, group string) (acked, next int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var a, n sql.NullInt64
	err = c.db.QueryRowContext(ctx, "SELECT g.acked, (SELECT MIN(m.`offset`) FROM "+messages+" m WHERE m.`offset` > g.acked)"+
		" FROM (SELECT COALESCE((SELECT offset_acked FROM "+offsets+" WHERE consumer_group = ?), 0) AS acked) g", group).Scan(&a, &n)
	if err != nil {
		return -1, -1, err
	}
	key := messages + "\x00" + group
	c.mu.Lock()
	defer c.mu.Unlock()
	if !n.Valid || n.Int64 == a.Int64+1 {
		delete(c.seen, key)
		return -1, -1, nil
	}
	s, ok := c.seen[key]
	if !ok || s.acked != a.Int64 || s.next != n.Int64 {
		c.seen[key] = gapSeen{acked: a.Int64, next: n.Int64, since: time.Now()}
		return -1, -1, nil
	}
	if time.Since(s.since) < GapWait {
		return -1, -1, nil
	}
	return a.Int64, n.Int64, nil
}

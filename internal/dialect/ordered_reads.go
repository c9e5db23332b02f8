package dialect

import (
	"database/sql"
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// GapWait is how long a consumer group of the SQL transport on
// MySQL/MariaDB waits before it reads past a missing offset: the time it
// gives an insert that AUTO_INCREMENT numbered before a row the group sees
// to land in the table. A row older than GapWait with a missing offset
// below it is read (the offset was rolled back or never used); a gap from
// a rollback delays its group by about this long.
const GapWait = 2 * time.Second

// orderedMySQLSchema is the message schema of the SQL transport on
// MySQL/MariaDB. A group reads the rows past the highest offset it acked,
// as watermill-sql's adapter does, but never past a row that may still
// land below the one it would read:
//
//   - The read is a locking read (LOCK IN SHARE MODE) at READ COMMITTED: it
//     waits for a row inserted by a transaction not yet committed, and takes
//     no gap locks. (watermill-sql reads at SERIALIZABLE, whose gap locks
//     hold back an insert already numbered below the row read until the
//     group has acked past it: the row landed below the acked offset and
//     was skipped for good.)
//   - A row whose offset is not the next one after the acked offset is read
//     only once it is GapWait old: AUTO_INCREMENT hands out an offset a
//     moment before its row is in the table, so a lower offset may be on
//     its way.
//
// It reads one row at a time: the rule looks at the first row past the
// acked offset.
type orderedMySQLSchema struct{ wideSchema }

// SubscribeIsolationLevel is READ COMMITTED: no gap locks.
func (orderedMySQLSchema) SubscribeIsolationLevel() sql.IsolationLevel {
	return sql.LevelReadCommitted
}

// SelectQuery reads the first row past the group's acked offset, waiting
// for an uncommitted one, and returns it unless it stands after a gap
// younger than GapWait.
func (s orderedMySQLSchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := params.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: params.Topic, ConsumerGroup: params.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, err
	}
	messages, _ := s.d.messageTables(params.Topic)
	q := "SELECT n.`offset`, n.`uuid`, n.`payload`, n.`metadata` FROM (" +
		"SELECT `offset`, `uuid`, `payload`, `metadata`, `created_at` FROM " + messages +
		" WHERE `offset` > (" + next.Query + ") ORDER BY `offset` ASC LIMIT 1 LOCK IN SHARE MODE) n" +
		" WHERE n.`offset` <= (" + next.Query + ") + @@auto_increment_increment" +
		fmt.Sprintf(" OR n.`created_at` < CURRENT_TIMESTAMP - INTERVAL %d SECOND", int(GapWait/time.Second))
	return wsql.Query{Query: q, Args: append(append([]any{}, next.Args...), next.Args...)}, nil
}

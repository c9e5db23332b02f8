package sql_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	wsql "github.com/postroom/postroom/transport/sql"
)

// stores are the databases of the SQL transport, with the statement that
// inserts a row as another program does (%s: the quoted table).
var stores = []struct {
	name   string
	open   func(testing.TB) *gorm.DB
	quote  func(topic string) string
	insert string
}{
	{"postgres", testenv.Postgres, func(topic string) string { return fmt.Sprintf(`"watermill_%s"`, topic) },
		`INSERT INTO %s (uuid, payload, metadata, transaction_id) VALUES (?, '', '{}', pg_current_xact_id())`},
	{"mariadb", testenv.MySQL, func(topic string) string { return fmt.Sprintf("`watermill_%s`", topic) },
		"INSERT INTO %s (uuid, payload, metadata) VALUES (?, '', '{}')"},
}

// TestRowsCommittedOutOfOrder: a group reads every row of its topic, also
// rows that commit after a row with a higher offset was read. On MySQL
// AUTO_INCREMENT hands out an offset before its row is in the table, so a
// row can appear below one the group already read: with watermill-sql's
// adapter (reading past the highest acked offset, at SERIALIZABLE, whose
// gap locks hold such an insert back until the read commits) the group
// skipped it for good, and the conformance suite saw 8 concurrent sends
// deliver 7.
func TestRowsCommittedOutOfOrder(t *testing.T) {
	for _, store := range stores {
		t.Run(store.name, func(t *testing.T) {
			t.Run("concurrent sends", func(t *testing.T) {
				db := store.open(t)
				tr, topic, got := orderedTopic(t, db)
				const senders, each = 8, 50
				var wg sync.WaitGroup
				for s := range senders {
					wg.Go(func() {
						for i := range each {
							msg := message.NewMessage(fmt.Sprintf("s%d-%d", s, i), nil)
							require.NoError(t, tr.Publisher().Publish(topic, msg))
						}
					})
				}
				wg.Wait()
				got.waitFor(t, senders*each)
			})
			t.Run("a row that appears below one read", func(t *testing.T) {
				// An insert that AUTO_INCREMENT numbered before another
				// but that lands after it, made certain with explicit
				// offsets (PostgreSQL reads in transaction order and
				// takes it after the other). The higher row claims to be
				// old: a gap is timed from when the group saw it, not
				// from created_at, which is when a statement began and
				// which another program can set.
				db := store.open(t)
				_, topic, got := orderedTopic(t, db)
				insert := func(id string, offset int) {
					require.NoError(t, db.Exec(insertWithOffset(store.name, store.quote(topic)), offset, id).Error)
				}
				insert("second", 2)
				time.Sleep(500 * time.Millisecond) // the group reads "second" now, unless it waits
				insert("first", 1)
				got.waitFor(t, 2)
			})
			t.Run("a row whose transaction is still open", func(t *testing.T) {
				db := store.open(t)
				_, topic, got := orderedTopic(t, db)
				q := fmt.Sprintf(store.insert, store.quote(topic))
				tx := db.Begin()
				require.NoError(t, tx.Exec(q, "first").Error)
				require.NoError(t, db.Exec(q, "second").Error)
				time.Sleep(500 * time.Millisecond) // the group reads "second" now, unless it waits
				require.NoError(t, tx.Commit().Error)
				got.waitFor(t, 2)
			})
			t.Run("a gap of a rolled back row is passed", func(t *testing.T) {
				db := store.open(t)
				_, topic, got := orderedTopic(t, db)
				q := fmt.Sprintf(store.insert, store.quote(topic))
				require.NoError(t, db.Exec(q, "first").Error)
				tx := db.Begin()
				require.NoError(t, tx.Exec(q, "rolled-back").Error)
				require.NoError(t, tx.Rollback().Error)
				require.NoError(t, db.Exec(q, "after the gap").Error)
				got.waitFor(t, 2)
			})
		})
	}
}

// insertWithOffset inserts a row with its offset given, created in 2001
// (the arguments: offset, ID).
func insertWithOffset(store, table string) string {
	if store == "postgres" {
		return `INSERT INTO ` + table + ` ("offset", uuid, payload, metadata, transaction_id, created_at)` +
			` VALUES (?, ?, '', '{}', pg_current_xact_id(), '2001-01-01')`
	}
	return "INSERT INTO " + table + " (`offset`, uuid, payload, metadata, created_at) VALUES (?, ?, '', '{}', '2001-01-01')"
}

// received is what a group took from its topic, by message ID.
type received struct {
	mu  sync.Mutex
	ids map[string]int
}

// waitFor waits until n distinct messages arrived, each once.
func (r *received) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		count, twice := len(r.ids), 0
		for _, c := range r.ids {
			if c > 1 {
				twice++
			}
		}
		r.mu.Unlock()
		require.Zero(t, twice, "messages delivered twice")
		if count >= n {
			time.Sleep(100 * time.Millisecond) // room for an extra delivery
			r.mu.Lock()
			defer r.mu.Unlock()
			require.Len(t, r.ids, n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived: the others were skipped", count, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orderedTopic declares a new topic for a group reading it from its start
// and acks what arrives.
func orderedTopic(t *testing.T, db *gorm.DB) (*wsql.Transport, string, *received) {
	t.Helper()
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	topic := testenv.Name("ordered_")
	got := subscribeGroup(t, tr, "readers", topic)
	return tr, topic, got
}

package sql_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	wsql "github.com/postroom/postroom/transport/sql"
)

// TestGroupsAlikeButForCaseEachGetEveryMessage: two consumer groups whose
// names differ only in case ("audit", "Audit": two handlers of an event,
// two endpoints) are two groups. On MariaDB a case-insensitive group
// column in the offsets table makes the two share one row: each gets about
// half of the topic, the rest acked by the other, without a word. Also
// with an offsets table that watermill-sql's own DDL created earlier: its
// column is made binary when a group subscribes.
func TestGroupsAlikeButForCaseEachGetEveryMessage(t *testing.T) {
	for _, store := range stores {
		for _, before := range []bool{false, true} {
			if before && store.name != "mariadb" {
				continue // PostgreSQL compares text byte for byte
			}
			t.Run(fmt.Sprintf("%s/offsets table from before=%v", store.name, before), func(t *testing.T) {
				db := store.open(t)
				topic := testenv.Name("groups_")
				if before {
					qs, err := wmsql.DefaultMySQLOffsetsAdapter{}.SchemaInitializingQueries(wmsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
					require.NoError(t, err)
					for _, q := range qs {
						require.NoError(t, db.Exec(q.Query).Error)
					}
				}
				tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond})
				require.NoError(t, err)
				t.Cleanup(func() { _ = tr.Close() })
				groups := map[string]*received{}
				for _, group := range []string{"audit", "Audit"} {
					groups[group] = subscribeGroup(t, tr, group, topic)
				}
				const n = 20
				for i := range n {
					require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(fmt.Sprintf("m-%d", i), nil)))
				}
				for group, got := range groups {
					t.Logf("group %s", group)
					got.waitFor(t, n)
				}
				if store.name == "mariadb" {
					var column string
					require.NoError(t, db.Raw("SELECT LOWER(DATA_TYPE) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"+
						" AND TABLE_NAME = ? AND COLUMN_NAME = 'consumer_group'", "watermill_offsets_"+topic).Scan(&column).Error)
					require.Equal(t, "varbinary", column)
				}
			})
		}
	}
}

// subscribeGroup subscribes group to topic on tr and acks what it receives.
func subscribeGroup(t *testing.T, tr *wsql.Transport, group, topic string) *received {
	t.Helper()
	sub, err := tr.Subscriber(group, 1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := &received{ids: map[string]int{}}
	go func() {
		for msg := range msgs {
			got.mu.Lock()
			got.ids[msg.UUID]++
			got.mu.Unlock()
			msg.Ack()
		}
	}()
	return got
}

// TestAnOffsetsTableItCannotAlterIsSaid, MariaDB: while a transaction
// holds an older offsets table (a running subscription's read), the ALTER
// gives up after its lock wait, says so at warn with the statement, and
// the subscription goes on; the connection goes back to the pool with
// its own lock wait. The next start, once the table is free, alters it.
func TestAnOffsetsTableItCannotAlterIsSaid(t *testing.T) {
	dsn := testenv.MySQLDatabaseDSN(t)
	db := testenv.Migrated(t, dsn, "MariaDB")
	sqlDB, err := db.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1) // the ALTER's connection is the one read below (until reading starts, which needs two)
	topic := testenv.Name("groups_")
	offsets := "watermill_offsets_" + topic
	qs, err := wmsql.DefaultMySQLOffsetsAdapter{}.SchemaInitializingQueries(wmsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	require.NoError(t, err)
	for _, q := range qs {
		require.NoError(t, db.Exec(q.Query).Error)
	}
	var wait int64
	require.NoError(t, db.Raw("SELECT @@SESSION.lock_wait_timeout").Scan(&wait).Error)
	holder := testenv.Migrated(t, dsn, "MariaDB") // another pool on the same database
	tx := holder.Begin()
	require.NoError(t, tx.Exec("SELECT * FROM `"+offsets+"`").Error)

	logger, logs := testenv.CapturedLogger(slog.LevelInfo)
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	sub, err := tr.Subscriber("audit", 1)
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	require.Less(t, time.Since(began), 15*time.Second)
	require.Contains(t, logs.String(), `msg="sql: could not make the consumer groups of a topic case sensitive`)
	require.Contains(t, logs.String(), "ALTER TABLE `"+offsets+"` MODIFY consumer_group VARBINARY(255) NOT NULL")
	var after int64
	require.NoError(t, db.Raw("SELECT @@SESSION.lock_wait_timeout").Scan(&after).Error)
	require.Equal(t, wait, after, "the pool's connection keeps its lock wait")
	sqlDB.SetMaxOpenConns(0)
	got := subscribeGroup(t, tr, "audit", topic)
	require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage("m-1", nil)))
	got.waitFor(t, 1)

	require.NoError(t, tx.Rollback().Error)
	again, err := wsql.New(wsql.Config{DB: db, PollInterval: 10 * time.Millisecond, Logger: logger})
	require.NoError(t, err) // the next start: a transport looks once per table
	t.Cleanup(func() { _ = again.Close() })
	subscribeGroup(t, again, "Audit", topic)
	var column string
	require.NoError(t, db.Raw("SELECT LOWER(DATA_TYPE) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"+
		" AND TABLE_NAME = ? AND COLUMN_NAME = 'consumer_group'", offsets).Scan(&column).Error)
	require.Equal(t, "varbinary", column)
	require.Contains(t, logs.String(), `msg="sql: made the consumer groups of a topic case sensitive`)
}

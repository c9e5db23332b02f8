package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/store"
)

// onEachDatabase runs test in parallel on each store, migrated.
func onEachDatabase(t *testing.T, test func(t *testing.T, db *gorm.DB, d dialect.Dialect)) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			d, err := dialects.Of(db)
			require.NoError(t, err)
			test(t, db, d)
		})
	}
}

func count(t *testing.T, db *gorm.DB, query string) int64 {
	var n int64
	require.NoError(t, db.Raw(query).Scan(&n).Error)
	return n
}

func TestCleanupDeletesExactlyTheOldRowsInBatches(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-240 * time.Hour)
	onEachDatabase(t, func(t *testing.T, db *gorm.DB, d dialect.Dialect) {
		// 23 old and 7 recent rows in each table; one exactly at the cut-off (kept).
		deliveries, err := d.Deliveries("postroom_deliveries")
		require.NoError(t, err)
		for i := range 30 {
			at := cutoff.Add(-time.Duration(i+1) * time.Minute)
			if i >= 23 {
				at = cutoff.Add(time.Duration(i-23) * time.Microsecond)
			}
			require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "c", "s", fmt.Sprint(i), "t", d.Time(at)).Error)
			require.NoError(t, db.Exec(d.WatermarkUpsert("postroom_stale_watermarks"), "c", "t", fmt.Sprint(i), 1, "m", d.Time(at)).Error)
			require.NoError(t, db.Exec(deliveries.Count, "c", fmt.Sprint(i), d.Time(at)).Error)
		}
		c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		res, err := c.Purge(context.Background(), handlers.CleanupStore{Retention: 240 * time.Hour, BatchSize: 5})
		require.NoError(t, err)
		require.EqualValues(t, 23, res.Inbox)
		require.EqualValues(t, 23, res.Watermarks)
		require.EqualValues(t, 23, res.Deliveries, "redelivery counts not updated since the cut-off")
		require.Equal(t, 18, res.Batches, "4 batches of 5 rows, a short one and an empty one per table")
		require.EqualValues(t, 7, count(t, db, "SELECT COUNT(*) FROM postroom_inbox"))
		require.EqualValues(t, 7, count(t, db, "SELECT COUNT(*) FROM postroom_stale_watermarks"))
		require.EqualValues(t, 7, count(t, db, "SELECT COUNT(*) FROM postroom_deliveries"))
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM postroom_inbox WHERE CAST(message_id AS INTEGER) < 23"), "every old row went, no recent one")

		again, err := c.Purge(context.Background(), handlers.CleanupStore{Before: cutoff})
		require.NoError(t, err)
		require.Zero(t, again.Inbox+again.Watermarks+again.Deliveries, "a repeat deletes nothing more")
	})
}

// TestCleanupPurgesRowsUpdatedMeanwhile: duplicates of expired keys are
// counted (their rows updated) while a purge runs; every expired row goes.
// On PostgreSQL an updated row moves, and its batch comes back short: a
// purge that takes that for the end leaves expired rows behind (about 2%
// here).
func TestCleanupPurgesRowsUpdatedMeanwhile(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	onEachDatabase(t, func(t *testing.T, db *gorm.DB, d dialect.Dialect) {
		const expired = 2000
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			for i := range expired {
				if err := tx.Exec(d.InboxInsert("postroom_inbox"), "c", "s", fmt.Sprint(i), "t", d.Time(now.Add(-300*time.Hour))).Error; err != nil {
					return err
				}
			}
			return nil
		}))
		c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		counted := make(chan int)
		go func() {
			n := 0
			for i := 0; ctx.Err() == nil; i = (i + 7) % expired {
				if db.Exec(d.InboxCountDuplicate("postroom_inbox"), "c", "s", fmt.Sprint(i)).Error == nil {
					n++
				}
			}
			counted <- n
		}()
		res, err := c.Purge(context.Background(), handlers.CleanupStore{Retention: 240 * time.Hour, BatchSize: 50, Pause: -1})
		stop()
		t.Logf("%d duplicates counted during the purge, %d batches", <-counted, res.Batches)
		require.NoError(t, err)
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM postroom_inbox"), "every expired row purged")
		require.EqualValues(t, expired, res.Inbox)
	})
}

func TestCleanupKeepsAClaimUntilItsLeaseRanOut(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-300 * time.Hour)
	onEachDatabase(t, func(t *testing.T, db *gorm.DB, d dialect.Dialect) {
		// Old claims of the external-effects mode: one still under its
		// lease (a call in flight), one whose lease ran out, one parked
		// (kept until resolved).
		claim := func(id string, lease time.Time) {
			require.NoError(t, db.Exec(d.ClaimInsert("postroom_inbox"), "c", "", id, "t", d.Time(old), d.Time(lease), "", nil).Error)
		}
		claim("live", now.Add(time.Minute))
		claim("expired", now.Add(-time.Minute))
		claim("parked", now.Add(time.Minute))
		require.NoError(t, db.Exec("UPDATE postroom_inbox SET status = 'parked' WHERE message_id = 'parked'").Error)
		c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		res, err := c.Purge(context.Background(), handlers.CleanupStore{Retention: 240 * time.Hour})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Inbox)
		var left []string
		require.NoError(t, db.Raw("SELECT message_id FROM postroom_inbox ORDER BY message_id").Scan(&left).Error)
		require.Equal(t, []string{"live", "parked"}, left, "a parked key waits for a person however old (found by a review: purged, a replay ran its effect again)")
	})
}

func TestCleanupRestsBetweenBatches(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	db := testenv.Databases[0].Open(t)
	d, err := dialects.Of(db)
	require.NoError(t, err)
	for i := range 12 {
		require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "c", "s", fmt.Sprint(i), "t", d.Time(now.Add(-300*time.Hour))).Error)
	}
	c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t)})
	require.NoError(t, err)

	// A rest longer than the test: the purge stops in the first one, when
	// its context ends, with the first batch deleted and the rest kept.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := c.Purge(ctx, handlers.CleanupStore{Retention: 240 * time.Hour, BatchSize: 5, Pause: time.Hour})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.EqualValues(t, 5, res.Inbox)
	require.EqualValues(t, 7, count(t, db, "SELECT COUNT(*) FROM postroom_inbox"))

	// Two full batches and a short one, each followed by a rest of Pause,
	// before the empty one that ends the purge.
	start := time.Now()
	res, err = c.Purge(context.Background(), handlers.CleanupStore{Retention: 240 * time.Hour, BatchSize: 3, Pause: 100 * time.Millisecond})
	require.NoError(t, err)
	require.EqualValues(t, 7, res.Inbox)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
}

// TestCleanupPendingCountsWhatPurgeDeletes on every store, deleting
// nothing itself.
func TestCleanupPendingCountsWhatPurgeDeletes(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	onEachDatabase(t, func(t *testing.T, db *gorm.DB, d dialect.Dialect) {
		for i, age := range []time.Duration{300 * time.Hour, 250 * time.Hour, time.Hour} {
			require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "c", "s", fmt.Sprint(i), "t", d.Time(now.Add(-age))).Error)
			require.NoError(t, db.Exec(d.WatermarkUpsert("postroom_stale_watermarks"), "c", "t", fmt.Sprint(i), 1, "m", d.Time(now.Add(-age))).Error)
		}
		require.NoError(t, db.Exec(d.ClaimInsert("postroom_inbox"), "c", "s", "live", "t", d.Time(now.Add(-300*time.Hour)), d.Time(now.Add(time.Minute)), "", nil).Error)
		c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t)})
		require.NoError(t, err)
		m := handlers.CleanupStore{Retention: 240 * time.Hour}
		pending, err := c.Pending(context.Background(), m)
		require.NoError(t, err)
		require.EqualValues(t, 2, pending.Inbox, "the live claim stays")
		require.EqualValues(t, 2, pending.Watermarks)
		require.EqualValues(t, 4, count(t, db, "SELECT COUNT(*) FROM postroom_inbox"), "nothing deleted")
		res, err := c.Purge(context.Background(), m)
		require.NoError(t, err)
		require.Equal(t, pending.Inbox, res.Inbox)
		require.Equal(t, pending.Watermarks, res.Watermarks)
	})
}

func TestCleanupRefusesBadConfig(t *testing.T) {
	db := testenv.SQLite(t)
	_, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, OutboxTopic: "postroom_outbox"})
	require.ErrorIs(t, err, dialect.ErrUnsupported, "SQLite has no outbox")
	_, err = handlers.NewCleanup(handlers.CleanupConfig{DB: db, Tables: store.Tables{Inbox: "x; DROP TABLE y"}})
	require.ErrorIs(t, err, dialect.ErrBadIdentifier)
	_, err = handlers.NewCleanup(handlers.CleanupConfig{DB: testenv.Postgres(t), OutboxTopic: "bad topic"})
	require.ErrorIs(t, err, dialect.ErrBadIdentifier)
}

// TestCleanupOfOneEndpointKeepsTheOthers: with a ConsumerPrefix (the bus
// passes its endpoint's), the inbox, watermark and redelivery-count purges
// delete only the rows of the consumers it starts, on every database: another endpoint
// sharing the database may keep its keys longer. '_' in a name is no
// wildcard.
func TestCleanupOfOneEndpointKeepsTheOthers(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-300 * time.Hour)
	onEachDatabase(t, func(t *testing.T, db *gorm.DB, d dialect.Dialect) {
		deliveries, err := d.Deliveries("postroom_deliveries")
		require.NoError(t, err)
		for _, consumer := range []string{"billing/h", "billing_eu/h", "billingX/h", "shipping/h"} {
			require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), consumer, "s", "m", "t", d.Time(old)).Error)
			require.NoError(t, db.Exec(d.WatermarkUpsert("postroom_stale_watermarks"), consumer, "t", "e", 1, "m", d.Time(old)).Error)
			require.NoError(t, db.Exec(deliveries.Count, consumer, "m", d.Time(old)).Error)
		}
		c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Now: func() time.Time { return now }, Logger: testenv.Logger(t),
			ConsumerPrefix: "billing/"})
		require.NoError(t, err)
		res, err := c.Purge(context.Background(), handlers.CleanupStore{Retention: 240 * time.Hour})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Inbox)
		require.EqualValues(t, 1, res.Watermarks)
		require.EqualValues(t, 1, res.Deliveries)
		var left []string
		require.NoError(t, db.Raw("SELECT consumer FROM postroom_inbox ORDER BY consumer").Scan(&left).Error)
		require.Equal(t, []string{"billingX/h", "billing_eu/h", "shipping/h"}, left)
		require.EqualValues(t, 3, count(t, db, "SELECT COUNT(*) FROM postroom_stale_watermarks"))
		require.EqualValues(t, 3, count(t, db, "SELECT COUNT(*) FROM postroom_deliveries"))
	})
}

// TestCleanupKeepsTheOutboxRowsNotRelayed, on PostgreSQL and MariaDB:
// cleanup deletes the outbox rows the relay has published and keeps the
// others however old, so a relay held up past the retention (a broker
// outage, a stopped relay) still sends its whole backlog afterwards.
func TestCleanupKeepsTheOutboxRowsNotRelayed(t *testing.T) {
	for _, database := range testenv.ServerDatabases {
		t.Run(database.Name, func(t *testing.T) {
			t.Parallel()
			db := database.Open(t)
			ctx := context.Background()
			broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			t.Cleanup(func() { _ = broker.Close() })
			newOutbox := func() *outbox.Outbox {
				o, err := outbox.New(outbox.Config{DB: db, Destination: broker, PollInterval: 10 * time.Millisecond})
				require.NoError(t, err)
				return o
			}
			publish := func(o *outbox.Outbox, ids ...string) {
				require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
					for _, id := range ids {
						if err := o.Publish(ctx, tx, "shipped", message.NewMessage(id, nil)); err != nil {
							return err
						}
					}
					return nil
				}))
			}
			received, err := broker.Subscribe(ctx, "shipped")
			require.NoError(t, err)
			receive := func(n int) []string {
				var ids []string
				for len(ids) < n {
					select {
					case m := <-received:
						m.Ack()
						ids = append(ids, m.UUID)
					case <-time.After(20 * time.Second):
						t.Fatalf("the relay published %v, not %d messages", ids, n)
					}
				}
				return ids
			}
			relay := func(o *outbox.Outbox, n int) (ids []string) {
				relayAll(t, o, func() { ids = receive(n) })
				return ids
			}

			publish(newOutbox(), "sent-1", "sent-2", "sent-3")
			require.ElementsMatch(t, []string{"sent-1", "sent-2", "sent-3"}, relay(newOutbox(), 3))
			waiting := newOutbox()
			publish(waiting, "waiting-1", "waiting-2")
			backdate := "UPDATE watermill_postroom_outbox SET created_at = created_at - INTERVAL 2 DAY"
			if database.Name == "postgres" {
				backdate = "UPDATE watermill_postroom_outbox SET created_at = created_at - INTERVAL '2 days'"
			}
			require.NoError(t, db.Exec(backdate).Error)

			c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, OutboxTopic: outbox.TopicDefault, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			res, err := c.Purge(ctx, handlers.CleanupStore{Retention: 24 * time.Hour})
			require.NoError(t, err)
			require.EqualValues(t, 3, res.Outbox, "the three relayed rows, older than the retention")
			require.EqualValues(t, 2, count(t, db, "SELECT COUNT(*) FROM watermill_postroom_outbox"))
			backlog, err := waiting.Backlog(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 2, backlog.Messages, "the rows not relayed are kept, however old")
			require.ElementsMatch(t, []string{"waiting-1", "waiting-2"}, relay(waiting, 2), "and relayed once the relay runs")
		})
	}
}

// relayAll runs o's relay until received returns and its backlog is
// empty, then stops and closes it (also when the test fails meanwhile).
func relayAll(t *testing.T, o *outbox.Outbox, received func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			<-done
			_ = o.Close()
		}
	}()
	received()
	require.Eventually(t, func() bool {
		b, err := o.Backlog(context.Background())
		return err == nil && b.Messages == 0
	}, 10*time.Second, 20*time.Millisecond, "the relay acks what it published")
	stop()
	stopped = true
	require.NoError(t, <-done)
	require.NoError(t, o.Close())
}

// numbers is a derived table of the numbers 1 to n in a column seq, on
// MySQL and MariaDB alike (MariaDB's seq_1_to_n tables are its own).
func numbers(n int) string {
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	return fmt.Sprintf("(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 1 AS seq FROM %s a, %s b, %s c, %s e WHERE a.d + 10 * b.d + 100 * c.d + 1000 * e.d < %d) numbers",
		digits, digits, digits, digits, n)
}

// TestTheOutboxPurgeEndsWhileRowsKeepAging, on PostgreSQL and MariaDB:
// the outbox's cut-off is an age the database applies at each DELETE, so
// under steady traffic relayed rows keep crossing it while the purge
// runs. The purge ends once a batch comes back short: here 250 rows past
// the cut-off, then 20 more crossing it every second for a minute, one
// batch of 100 a second. Ending on an empty batch, it would run until the
// rows ran out (seconds over many batches on MariaDB).
func TestTheOutboxPurgeEndsWhileRowsKeepAging(t *testing.T) {
	for _, database := range testenv.ServerDatabases {
		t.Run(database.Name, func(t *testing.T) {
			t.Parallel()
			db := database.Open(t)
			broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			t.Cleanup(func() { _ = broker.Close() })
			o, err := outbox.New(outbox.Config{DB: db, Destination: broker, PollInterval: 10 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return o.Publish(context.Background(), tx, "shipped", message.NewMessage("first", nil))
			}))
			relayAll(t, o, func() {})

			// Copies of the relayed row (the first, by offset): 250 a day
			// and an hour old, then one every 50 ms from a day old on,
			// relayed too.
			const day = 86400
			if database.Name == "postgres" {
				require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
					for _, q := range []string{
						`INSERT INTO watermill_postroom_outbox (uuid, created_at, payload, metadata, transaction_id)
						 SELECT uuid || '-old-' || g, LOCALTIMESTAMP - INTERVAL '25 hours', payload, metadata, pg_current_xact_id()
						 FROM watermill_postroom_outbox, generate_series(1, 250) g`,
						`INSERT INTO watermill_postroom_outbox (uuid, created_at, payload, metadata, transaction_id)
						 SELECT uuid || '-aging-' || g, LOCALTIMESTAMP - ` + fmt.Sprint(day) + ` * INTERVAL '1 second' + g * INTERVAL '50 milliseconds', payload, metadata, pg_current_xact_id()
						 FROM watermill_postroom_outbox, generate_series(1, 1200) g WHERE "offset" = (SELECT MIN("offset") FROM watermill_postroom_outbox)`,
						`UPDATE watermill_offsets_postroom_outbox SET last_processed_transaction_id = pg_current_xact_id(),
						 offset_acked = (SELECT MAX("offset") FROM watermill_postroom_outbox) WHERE consumer_group = '` + dialect.OutboxRelayGroup + `'`,
					} {
						if err := tx.Exec(q).Error; err != nil {
							return err
						}
					}
					return nil
				}))
			} else {
				for _, q := range []string{
					"INSERT INTO watermill_postroom_outbox (uuid, created_at, payload, metadata, `acked`)" +
						" SELECT CONCAT(uuid, '-old-', seq), CURRENT_TIMESTAMP - INTERVAL 25 HOUR, payload, metadata, TRUE FROM watermill_postroom_outbox, " + numbers(250),
					"INSERT INTO watermill_postroom_outbox (uuid, created_at, payload, metadata, `acked`)" +
						" SELECT CONCAT(uuid, '-aging-', seq), CURRENT_TIMESTAMP(6) - INTERVAL " + fmt.Sprint(day) + " SECOND + INTERVAL seq * 50000 MICROSECOND, payload, metadata, TRUE" +
						" FROM watermill_postroom_outbox, " + numbers(1200) + " WHERE `offset` = (SELECT MIN(`offset`) FROM watermill_postroom_outbox)",
				} {
					require.NoError(t, db.Exec(q).Error)
				}
			}
			c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, OutboxTopic: outbox.TopicDefault, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			began := time.Now()
			res, err := c.Purge(ctx, handlers.CleanupStore{Retention: day * time.Second, BatchSize: 100, Pause: time.Second})
			require.NoError(t, err, "the purge ended after %d batches, %d outbox rows", res.Batches, res.Outbox)
			t.Logf("purged %d outbox rows in %d batches (every table) in %s", res.Outbox, res.Batches, time.Since(began).Round(time.Millisecond))
			require.GreaterOrEqual(t, res.Outbox, int64(250), "the rows past the cut-off")
			require.Less(t, res.Outbox, int64(250+400), "it stopped before the aging rows ran out")
		})
	}
}

package storeinfo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

// TestStatsFindsTheOldestRowOfALargeInboxWithoutScanningIt: on PostgreSQL,
// the oldest key of an inbox above storeinfo.ExactCountBelow rows is found by a
// TABLESAMPLE sample, then MIN through the BRIN index at or below the
// sample's oldest (docs/operations.md, Metrics). The oldest key sits in the
// table's last page, where a sample rarely looks: returning the sample's
// oldest fails the test (unless the sample, about 7% of the pages, takes
// that page), and so does a full scan of the inbox, which
// PostgreSQL counts in pg_stat_xact_user_tables (a sample scan adds to
// seq_tup_read only the rows it sampled, and to seq_scan nothing).
// 300,001 rows from one INSERT … SELECT: a few seconds.
func TestStatsFindsTheOldestRowOfALargeInboxWithoutScanningIt(t *testing.T) {
	db := testenv.Postgres(t)
	const rows = 300_000
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	// Keys in time order, then the oldest one last.
	require.NoError(t, db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		SELECT 'c', '', 'm' || g, 't', ?::timestamptz + g * interval '1 second' FROM generate_series(1, ?) g`, base, rows).Error)
	oldest := base.Add(-24 * time.Hour)
	require.NoError(t, db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		VALUES ('c', '', 'oldest', 't', ?)`, oldest).Error)
	require.NoError(t, db.Exec("VACUUM ANALYZE postroom_inbox").Error) // what autovacuum does: summarise the BRIN ranges, estimate the rows

	// reads are this connection's counts of scans of the inbox, not yet
	// flushed to the cumulative statistics: one transaction keeps them.
	type reads struct{ seqScans, seqRows, indexScans int64 }
	var before, after reads
	var stats []storeinfo.TableStats
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		read := func(r *reads) error {
			return tx.Raw(`SELECT seq_scan, seq_tup_read, COALESCE(idx_scan, 0) FROM pg_stat_xact_user_tables
				WHERE relid = 'postroom_inbox'::regclass`).Row().Scan(&r.seqScans, &r.seqRows, &r.indexScans)
		}
		if err := read(&before); err != nil {
			return err
		}
		var err error
		if stats, err = storeinfo.Stats(context.Background(), tx, store.Tables{}); err != nil {
			return err
		}
		return read(&after)
	}))
	inbox := stats[0]
	require.Equal(t, "postroom_inbox", inbox.Table)
	require.GreaterOrEqual(t, inbox.Rows, int64(storeinfo.ExactCountBelow), "the estimate path, where the sample is used")
	require.True(t, oldest.Equal(inbox.Oldest), "oldest %s, got %s", oldest, inbox.Oldest)
	require.Zero(t, after.seqScans-before.seqScans, "no sequential scan of the inbox")
	require.Less(t, after.seqRows-before.seqRows, int64(rows/4), "a sample of the inbox read, not its %d rows", rows+1)
	require.Equal(t, int64(1), after.indexScans-before.indexScans, "MIN through the BRIN index")
	t.Logf("sampled %d of %d rows", after.seqRows-before.seqRows, rows+1)
}

func TestInboxSummaryPerConsumer(t *testing.T) {
	for _, s := range testenv.Databases {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			db := s.Open(t)
			d, err := dialects.Of(db)
			require.NoError(t, err)
			base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
			for i, k := range []struct {
				consumer string
				at       time.Time
			}{{"billing/Charge", base.Add(time.Hour)}, {"billing/Charge", base}, {"shipping/Ship", base.Add(2 * time.Hour)}} {
				require.NoError(t, db.Exec("INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at, duplicates) VALUES (?, '', ?, 't', ?, ?)",
					k.consumer, fmt.Sprint(i), d.Time(k.at), i).Error)
			}
			got, err := storeinfo.InboxSummary(context.Background(), db, store.Tables{})
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, storeinfo.ConsumerSummary{Consumer: "billing/Charge", Rows: 2, Oldest: base, Duplicates: 1}, got[0])
			require.Equal(t, storeinfo.ConsumerSummary{Consumer: "shipping/Ship", Rows: 1, Oldest: base.Add(2 * time.Hour), Duplicates: 2}, got[1])

			_, err = storeinfo.InboxSummary(context.Background(), db, store.Tables{Inbox: "x;y"})
			require.ErrorContains(t, err, "bad table name")
		})
	}
}

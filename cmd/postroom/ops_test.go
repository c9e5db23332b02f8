package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/scheduler"
)

func TestInboxStatsAndPurge(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	d, err := dialects.Of(db)
	require.NoError(t, err)
	now := time.Now()
	for i, at := range []time.Time{now.Add(-300 * time.Hour), now.Add(-250 * time.Hour), now.Add(-time.Hour)} {
		require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing", "", fmt.Sprint(i), "t", d.Time(at)).Error)
	}
	require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "shipping", "", "s", "t", d.Time(now)).Error)
	for range 2 {
		require.NoError(t, db.Exec(d.InboxCountDuplicate("postroom_inbox"), "billing", "", "1").Error)
	}

	out, err := run(t, "inbox", "stats", "--json", "--dsn", dsn)
	require.NoError(t, err)
	var stats []storeinfo.ConsumerSummary
	require.NoError(t, json.Unmarshal([]byte(out), &stats))
	require.Len(t, stats, 2)
	require.Equal(t, "billing", stats[0].Consumer)
	require.EqualValues(t, 3, stats[0].Rows)
	require.WithinDuration(t, now.Add(-300*time.Hour), stats[0].Oldest, time.Second)
	require.EqualValues(t, 2, stats[0].Duplicates)
	require.EqualValues(t, 0, stats[1].Duplicates)

	out, err = run(t, "inbox", "stats", "--dsn", dsn)
	require.NoError(t, err)
	require.Contains(t, out, "CONSUMER")
	require.Contains(t, out, "shipping")

	out, err = run(t, "inbox", "purge", "--older-than", "240h", "--batch", "1", "--dsn", dsn)
	require.NoError(t, err)
	require.Contains(t, out, "purge postroom_inbox: 1 of 2 rows\n") // plain lines when not on a terminal
	require.Contains(t, out, "purge postroom_inbox: 2 of 2 rows\n")
	require.Contains(t, out, "purged 2 inbox keys")
	_, err = run(t, "inbox", "purge", "--dsn", dsn)
	require.ErrorContains(t, err, "--older-than must be positive")
}

// TestInboxPurgeRefusesBelowTheHorizon: keys younger than the redelivery
// horizon still protect against a redelivery; purge keeps them unless
// --force, and says why.
func TestInboxPurgeRefusesBelowTheHorizon(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	d, err := dialects.Of(db)
	require.NoError(t, err)
	require.NoError(t, db.Exec(d.InboxInsert("postroom_inbox"), "billing/Charge", "", "recent", "t", d.Time(time.Now().Add(-45*time.Minute))).Error)
	keys := func() (n int64) {
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&n).Error)
		return n
	}

	for _, olderThan := range []string{"30m", "1h", (purgeHorizon - time.Millisecond).String()} {
		_, err = run(t, "inbox", "purge", "--older-than", olderThan, "--dsn", dsn)
		require.ErrorIs(t, err, idempotency.ErrRetentionTooShort, olderThan)
		require.ErrorContains(t, err, "a redelivery of their messages would be handled again")
		require.ErrorContains(t, err, "--force")
	}
	require.EqualValues(t, 1, keys(), "nothing purged")

	out, err := run(t, "inbox", "purge", "--older-than", purgeHorizon.String(), "--dsn", dsn)
	require.NoError(t, err, "at the horizon")
	require.Contains(t, out, "purged 0 inbox keys")
	out, err = run(t, "inbox", "purge", "--older-than", "30m", "--force", "--dsn", dsn)
	require.NoError(t, err)
	require.Contains(t, out, "purged 1 inbox keys")
	require.Zero(t, keys())
	require.Equal(t, time.Hour+time.Minute+700*time.Millisecond, purgeHorizon, "RedeliveryWindow, three retries from 100ms, an external-effects lease")
}

func TestSchedulesCommands(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	defineCleanup(t, db)

	out, err := run(t, "schedules", "list", "--json", "--dsn", dsn)
	require.NoError(t, err)
	var list []schedcontrol.Stored
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
	require.Equal(t, "cleanup", list[0].Name)
	require.Equal(t, "every 12h0m0s", list[0].Spec)
	require.False(t, list[0].Paused)

	out, err = run(t, "schedules", "pause", "cleanup", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "cleanup: paused: it fires no more until `postroom schedules resume cleanup`\n", out)
	out, err = run(t, "schedules", "trigger", "cleanup", "--dsn", dsn)
	require.EqualError(t, err, `scheduler: schedule "cleanup" is paused: resume it first`, "a paused schedule would not fire")
	require.NotContains(t, out, "due")
	out, err = run(t, "schedules", "resume", "cleanup", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("cleanup: resumed: next run at %s (slots missed while paused follow its missed-slot policy)\n", list[0].NextRunAt.Format(time.RFC3339)), out,
		"the next run it says is the stored one")
	out, err = run(t, "schedules", "trigger", "cleanup", "--dsn", dsn)
	require.NoError(t, err)
	said := out
	out, err = run(t, "schedules", "list", "--json", "--dsn", dsn)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.WithinDuration(t, time.Now(), list[0].NextRunAt, 10*time.Second, "triggered: due now")
	require.Equal(t, fmt.Sprintf("cleanup: due since %s: the next tick of a running instance fires it\n", list[0].NextRunAt.Format(time.RFC3339)), said)
	_, err = run(t, "schedules", "pause", "nope", "--dsn", dsn)
	require.ErrorContains(t, err, `no schedule named "nope"`)
	for _, action := range []string{"pause", "resume", "trigger"} {
		_, err = run(t, "schedules", action, "--dsn", dsn)
		require.EqualError(t, err, "pass a schedule name (see postroom schedules list)", action)
		_, err = run(t, "schedules", action, "cleanup", "nope", "--dsn", dsn)
		require.EqualError(t, err, "pass one schedule name, not 2 (see postroom schedules list)", action)
	}
}

func defineCleanup(t *testing.T, db *gorm.DB) {
	s, err := scheduler.New(scheduler.Config{DB: db, Schedules: []scheduler.Schedule{{Name: "cleanup", Every: 12 * time.Hour}},
		Emit: func(context.Context, *gorm.DB, scheduler.Schedule, time.Time) error { return nil }})
	require.NoError(t, err)
	require.NoError(t, s.Define(context.Background()))
}

func TestProgressBar(t *testing.T) {
	require.Equal(t, "postroom_inbox [#####.....]  50% 5/10", progressBar("postroom_inbox", 5, 10, 10))
	require.Equal(t, "w [##########] 100% 0/0", progressBar("w", 0, 0, 10))
	var b strings.Builder
	p := newPurgeProgress(&b, true)
	p.pending = map[string]int64{"a": 4, "b": 2}
	p.update("a", 2)
	p.update("a", 4)
	p.update("b", 2)
	p.done()
	half, full := strings.Repeat("#", 15)+strings.Repeat(".", 15), strings.Repeat("#", 30)
	require.Equal(t, "\ra ["+half+"]  50% 2/4\ra ["+full+"] 100% 4/4\n\rb ["+full+"] 100% 2/2\n", b.String(),
		"one line per table, redrawn in place")
}

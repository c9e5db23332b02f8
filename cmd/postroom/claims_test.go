package main

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/inbox"
)

func TestInboxUnresolvedAndResolve(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	d, err := dialects.Of(db)
	require.NoError(t, err)
	now := time.Now()
	claim := func(id string, lease time.Time, status string) {
		require.NoError(t, db.Exec(d.ClaimInsert("postroom_inbox"), "payments", "shop", id, "Charge", d.Time(now.Add(-time.Hour)), d.Time(lease), "", nil).Error)
		require.NoError(t, db.Exec("UPDATE postroom_inbox SET status = ? WHERE message_id = ?", status, id).Error)
	}
	claim("parked-1", now.Add(-time.Minute), "parked")
	claim("expired-1", now.Add(-time.Minute), "processing")
	claim("live-1", now.Add(time.Hour), "processing") // a call in flight: not listed
	claim("done-1", now.Add(-time.Minute), "done")

	out, err := run(t, "inbox", "unresolved", "--json", "--dsn", dsn)
	require.NoError(t, err)
	var list []unresolvedClaim
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 2)
	ids := []string{list[0].MessageID, list[1].MessageID}
	require.ElementsMatch(t, []string{"parked-1", "expired-1"}, ids)
	for _, c := range list {
		require.Equal(t, idempotency.Key("payments", "shop", c.MessageID), c.IdempotencyKey, "the key, as the table shows it")
		require.Equal(t, "shop", c.Source)
		require.False(t, c.LeaseUntil.IsZero(), "the lease")
	}
	require.Contains(t, out, `"idempotency_key":"`+list[0].IdempotencyKey+`"`)

	out, err = run(t, "inbox", "unresolved", "--dsn", dsn)
	require.NoError(t, err)
	require.Contains(t, out, "IDEMPOTENCY KEY")
	require.Contains(t, out, idempotency.Key("payments", "shop", "parked-1"))

	out, err = run(t, "inbox", "resolve", "payments", "parked-1", "--source", "shop", "--done", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "done: message parked-1 of payments\n", out)
	_, err = run(t, "inbox", "resolve", "payments", "expired-1", "--source", "shop", "--release", "--dsn", dsn)
	require.NoError(t, err)
	_, err = run(t, "inbox", "resolve", "payments", "live-1", "--source", "shop", "--release", "--dsn", dsn)
	require.ErrorIs(t, err, claims.ErrNotUnresolved)
	_, err = run(t, "inbox", "resolve", "payments", "x", "--dsn", dsn)
	require.ErrorContains(t, err, "exactly one of --done")

	var statuses []string
	require.NoError(t, db.Raw("SELECT status FROM postroom_inbox ORDER BY message_id").Scan(&statuses).Error)
	require.Equal(t, []string{"done", "released", "processing", "done"}, statuses) // done-1, expired-1, live-1, parked-1
}

// TestInboxResolveAttempts: with --attempts, resolve takes that attempt
// only: a claim that moved on since the operator looked (released, then
// parked again by the next copy) stays unresolved.
func TestInboxResolveAttempts(t *testing.T) {
	dsn := testenv.PostgresSchemaDSN(t)
	db := testenv.Migrated(t, dsn, "PostgreSQL")
	d, err := dialects.Of(db)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, db.Exec(d.ClaimInsert("postroom_inbox"), "payments", "shop", "parked-2", "Charge", d.Time(now.Add(-time.Hour)),
		d.Time(now.Add(-time.Minute)), "", nil).Error)
	require.NoError(t, db.Exec("UPDATE postroom_inbox SET status = 'parked', attempts = 2 WHERE message_id = 'parked-2'").Error)

	_, err = run(t, "inbox", "resolve", "payments", "parked-2", "--source", "shop", "--done", "--attempts", "1", "--dsn", dsn)
	require.ErrorIs(t, err, claims.ErrClaimChanged)
	require.ErrorContains(t, err, "attempt 1 was shown, the claim is at attempt 2, parked")
	var status string
	require.NoError(t, db.Raw("SELECT status FROM postroom_inbox WHERE message_id = 'parked-2'").Scan(&status).Error)
	require.Equal(t, "parked", status, "the attempt nobody saw stays unresolved")

	_, err = run(t, "inbox", "resolve", "payments", "parked-2", "--source", "shop", "--done", "--attempts", "5", "--dsn", dsn)
	require.ErrorIs(t, err, claims.ErrAttemptNotReached, "an attempt the claim never had")
	require.NotErrorIs(t, err, claims.ErrClaimChanged, "no later copy ran")
	require.ErrorContains(t, err, "the claim is at attempt 2, parked; attempt 5 is not it): nothing was resolved")

	out, err := run(t, "inbox", "resolve", "payments", "parked-2", "--source", "shop", "--done", "--attempts", "2", "--dsn", dsn)
	require.NoError(t, err)
	require.Equal(t, "done: message parked-2 of payments\n", out)
}

// TestTheParkedReasonsCommandRuns: the resolve command in a parked
// message's reason, run through sh, gives inbox resolve the consumer,
// message ID, source and attempt, however odd the producer's ID and source.
func TestTheParkedReasonsCommandRuns(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	for _, key := range []inbox.Key{
		{Source: "checkout", MessageID: "3f0c"},
		{Source: "", MessageID: "plain"},
		{Source: "s;x", MessageID: "it's 1"},
		{Source: "a b", MessageID: "$(touch x) `y` \\ \"q\""},
		{Source: "-s", MessageID: "-n"},
		{Source: "x", MessageID: "--done"},
	} {
		reason := (&inbox.OutcomeUnknownError{Consumer: "billing/payments.ChargeCard", Key: key, Attempts: 3}).Error()
		_, line, ok := strings.Cut(reason, "then run `postroom inbox resolve ")
		require.True(t, ok, reason)
		line, _, ok = strings.Cut(line, "` if it did")
		require.True(t, ok, reason)
		out, err := exec.Command(sh, "-c", `printf '%s\0' `+line).Output()
		require.NoError(t, err, line)
		args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")

		root, _ := newRoot(io.Discard, io.Discard)
		cmd, flags, err := root.Find(append([]string{"inbox", "resolve"}, args...))
		require.NoError(t, err, line)
		require.NoError(t, cmd.ParseFlags(flags), line)
		require.Equal(t, []string{"billing/payments.ChargeCard", key.MessageID}, cmd.Flags().Args(), line)
		require.Equal(t, key.Source, cmd.Flag("source").Value.String(), line)
		require.Equal(t, "3", cmd.Flag("attempts").Value.String(), line)
		require.Equal(t, "true", cmd.Flag("done").Value.String(), line)
		require.Equal(t, "false", cmd.Flag("release").Value.String(), line)
	}
}

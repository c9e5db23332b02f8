package dialect_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

// claim is an inbox row of the external-effects mode, as ClaimRead reads it.
type claim struct {
	status   string
	lease    time.Time // zero for NULL
	attempts int
	checksum string
}

func (e *env) readClaim(id string) claim {
	e.t.Helper()
	var c claim
	var lease any
	e.scan(e.d.ClaimRead(e.tables.Inbox), []any{"c", "s", id}, &c.status, &lease, &c.attempts, &c.checksum)
	c.lease = e.parse(lease)
	return c
}

func (e *env) claimInsert(id string, received, lease time.Time) int64 {
	e.t.Helper()
	return e.exec(e.db, e.d.ClaimInsert(e.tables.Inbox), "c", "s", id, "Type", e.tm(received), e.tm(lease), "sum-"+id, []byte(id))
}

func (e *env) receivedAt(id string) time.Time {
	e.t.Helper()
	var v any
	e.scan("SELECT received_at FROM "+e.tables.Inbox+" WHERE consumer = ? AND source = ? AND message_id = ?", []any{"c", "s", id}, &v)
	return e.parse(v)
}

// ClaimInsert claims a new key as processing, attempt 1, under a lease; a
// key that exists is left as it is.
func TestStatementsClaimInsert(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lease := t0.Add(time.Minute)
		require.EqualValues(t, 1, e.claimInsert("m", t0, lease))
		require.Equal(t, claim{dialect.StatusProcessing, lease.Truncate(time.Microsecond), 1, "sum-m"}, e.readClaim("m"))
		require.EqualValues(t, 0, e.claimInsert("m", t0.Add(time.Hour), lease.Add(time.Hour)), "the key exists")
		require.EqualValues(t, 0, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", "m", "Type", e.tm(t0)), "nor does the plain inbox take it")
		require.Equal(t, claim{dialect.StatusProcessing, lease.Truncate(time.Microsecond), 1, "sum-m"}, e.readClaim("m"))
		require.EqualValues(t, 1, e.claimInsert("M", t0, lease), "keys compare bytes")

		var c claim
		err := e.db.Raw(e.d.ClaimRead(e.tables.Inbox), "c", "s", "none").Row().Scan(&c.status, new(any), &c.attempts, &c.checksum)
		require.ErrorIs(t, err, sql.ErrNoRows, "no claim of an unknown key")
	})
}

// ClaimTakeover takes a claim over as the next attempt only if it is
// still in the status and attempt it was read in (compare-and-set), and
// starts the key's retention again.
func TestStatementsClaimTakeoverIsACompareAndSet(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.EqualValues(t, 1, e.claimInsert("m", t0, t0.Add(time.Minute)))
		take := e.d.ClaimTakeover(e.tables.Inbox)
		later, lease := t0.Add(time.Hour), t0.Add(time.Hour+time.Minute)
		require.EqualValues(t, 0, e.exec(e.db, take, e.tm(lease), e.tm(later), "c", "s", "m", dialect.StatusProcessing, 2), "not at attempt 2")
		require.EqualValues(t, 0, e.exec(e.db, take, e.tm(lease), e.tm(later), "c", "s", "m", dialect.StatusReleased, 1), "not released")
		require.EqualValues(t, 1, e.exec(e.db, take, e.tm(lease), e.tm(later), "c", "s", "m", dialect.StatusProcessing, 1))
		require.EqualValues(t, 0, e.exec(e.db, take, e.tm(lease), e.tm(later), "c", "s", "m", dialect.StatusProcessing, 1),
			"a second instance that read attempt 1 loses")
		require.Equal(t, claim{dialect.StatusProcessing, lease.Truncate(time.Microsecond), 2, "sum-m"}, e.readClaim("m"))
		require.Equal(t, later.Truncate(time.Microsecond), e.receivedAt("m"), "retention starts again at the takeover")
		require.EqualValues(t, 0, e.exec(e.db, take, e.tm(lease), e.tm(later), "c", "s", "M", dialect.StatusProcessing, 2), "keys compare bytes")
	})
}

// ClaimMove moves a claim of one attempt to a new status if it is in one
// of two statuses.
func TestStatementsClaimMove(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.EqualValues(t, 1, e.claimInsert("m", t0, t0.Add(time.Minute)))
		move := e.d.ClaimMove(e.tables.Inbox)
		p, r, d, parked := dialect.StatusProcessing, dialect.StatusReleased, dialect.StatusDone, dialect.StatusParked
		require.EqualValues(t, 0, e.exec(e.db, move, d, nil, "c", "s", "m", 2, p, p), "another attempt")
		require.EqualValues(t, 0, e.exec(e.db, move, d, nil, "c", "s", "m", 1, r, parked), "not in those statuses")
		require.EqualValues(t, 1, e.exec(e.db, move, r, nil, "c", "s", "m", 1, p, p))
		require.Equal(t, claim{r, time.Time{}, 1, "sum-m"}, e.readClaim("m"), "released, no lease")
		require.EqualValues(t, 1, e.execNative(move, parked, e.tm(t0), "c", "s", "m", 1, p, r), "either of two statuses")
		require.Equal(t, claim{parked, t0.Truncate(time.Microsecond), 1, "sum-m"}, e.readClaim("m"))
	})
}

// ClaimTakeReleased marks a released key done as the next attempt.
func TestStatementsClaimTakeReleased(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.EqualValues(t, 1, e.claimInsert("m", t0, t0.Add(time.Minute)))
		takeReleased := e.d.ClaimTakeReleased(e.tables.Inbox)
		later := t0.Add(time.Hour)
		require.EqualValues(t, 0, e.exec(e.db, takeReleased, e.tm(later), "c", "s", "m"), "processing, not released")
		require.EqualValues(t, 1, e.exec(e.db, e.d.ClaimMove(e.tables.Inbox), dialect.StatusReleased, nil, "c", "s", "m", 1,
			dialect.StatusProcessing, dialect.StatusProcessing))
		require.EqualValues(t, 1, e.execNative(takeReleased, e.tm(later), "c", "s", "m"))
		require.Equal(t, claim{dialect.StatusDone, time.Time{}, 2, "sum-m"}, e.readClaim("m"))
		require.Equal(t, later.Truncate(time.Microsecond), e.receivedAt("m"))
		require.EqualValues(t, 0, e.exec(e.db, takeReleased, e.tm(later), "c", "s", "m"), "done now")
	})
}

// ClaimResolve settles an unresolved claim (parked, or processing under a
// lease that ran out) only; ClaimResolveAttempt only that of one attempt;
// ClaimsUnresolved lists them, oldest first.
func TestStatementsClaimResolve(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		now := t0.Add(time.Hour)
		require.EqualValues(t, 1, e.claimInsert("expired", t0.Add(2*time.Second), t0.Add(time.Minute)))
		require.EqualValues(t, 1, e.claimInsert("live", t0, now.Add(time.Minute)))
		require.EqualValues(t, 1, e.claimInsert("parked", t0.Add(time.Second), now.Add(time.Minute)))
		require.EqualValues(t, 1, e.exec(e.db, e.d.ClaimMove(e.tables.Inbox), dialect.StatusParked, nil, "c", "s", "parked", 1,
			dialect.StatusProcessing, dialect.StatusProcessing))
		require.EqualValues(t, 1, e.claimInsert("released", t0, t0))
		require.EqualValues(t, 1, e.exec(e.db, e.d.ClaimMove(e.tables.Inbox), dialect.StatusReleased, nil, "c", "s", "released", 1,
			dialect.StatusProcessing, dialect.StatusProcessing))
		require.EqualValues(t, 1, e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), "c", "s", "done", "Type", e.tm(t0)))

		list := func(limit int) []string {
			rows, err := e.db.Raw(e.d.ClaimsUnresolved(e.tables.Inbox), e.tm(now), limit).Rows()
			require.NoError(t, err)
			defer rows.Close()
			var ids []string
			for rows.Next() {
				var consumer, source, id, typ, status string
				var received, lease any
				var attempts int
				require.NoError(t, rows.Scan(&consumer, &source, &id, &typ, &received, &status, &lease, &attempts))
				ids = append(ids, id)
			}
			require.NoError(t, rows.Err())
			return ids
		}
		require.Equal(t, []string{"parked", "expired"}, list(10), "oldest received first")
		require.Equal(t, []string{"parked"}, list(1))

		resolve, attempt := e.d.ClaimResolve(e.tables.Inbox), e.d.ClaimResolveAttempt(e.tables.Inbox)
		for _, id := range []string{"live", "released", "done", "none"} {
			require.EqualValues(t, 0, e.exec(e.db, resolve, dialect.StatusDone, e.tm(now), "c", "s", id, e.tm(now)), "%s is not unresolved", id)
		}
		require.EqualValues(t, 0, e.exec(e.db, attempt, dialect.StatusReleased, e.tm(now), "c", "s", "parked", e.tm(now), 2), "another attempt")
		require.EqualValues(t, 1, e.exec(e.db, attempt, dialect.StatusReleased, e.tm(now), "c", "s", "parked", e.tm(now), 1))
		require.Equal(t, claim{dialect.StatusReleased, time.Time{}, 1, "sum-parked"}, e.readClaim("parked"))
		require.Equal(t, now.Truncate(time.Microsecond), e.receivedAt("parked"), "retention starts again at the resolution")
		require.EqualValues(t, 1, e.execNative(resolve, dialect.StatusDone, e.tm(now), "c", "s", "expired", e.tm(now)))
		require.Equal(t, claim{dialect.StatusDone, time.Time{}, 1, "sum-expired"}, e.readClaim("expired"))
		require.Empty(t, list(10))
	})
}

// ClaimReadLocked, in a transaction, reads the claim as it is now, not as
// the transaction's snapshot saw it (MySQL's REPEATABLE READ).
func TestStatementsClaimReadLockedSeesTheLatest(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.d == (sqlite.Dialect{}) {
			t.Skip("SQLite has one connection, one writer: no other transaction can write meanwhile")
		}
		require.EqualValues(t, 1, e.claimInsert("m", t0, t0.Add(time.Minute)))
		tx := e.begin()
		var status string
		require.NoError(t, tx.Raw(e.d.ClaimRead(e.tables.Inbox), "c", "s", "m").Row().Scan(&status, new(any), new(int), new(string)))
		require.Equal(t, dialect.StatusProcessing, status)
		require.EqualValues(t, 1, e.exec(e.db, e.d.ClaimMove(e.tables.Inbox), dialect.StatusReleased, nil, "c", "s", "m", 1,
			dialect.StatusProcessing, dialect.StatusProcessing), "another instance releases it")
		var attempts int
		require.NoError(t, tx.Raw(e.d.ClaimReadLocked(e.tables.Inbox), "c", "s", "m").Row().Scan(&status, new(any), &attempts, new(string)))
		require.Equal(t, dialect.StatusReleased, status, "the claim as it is now")
		require.EqualValues(t, 1, e.exec(tx, e.d.ClaimTakeReleased(e.tables.Inbox), e.tm(t0), "c", "s", "m"))
		require.NoError(t, tx.Commit().Error)
		require.Equal(t, dialect.StatusDone, e.readClaim("m").status)
	})
}

package dialect_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
)

// inboxKey is the key of an inbox row.
type inboxKey struct{ consumer, source, id string }

func (e *env) insertKey(k inboxKey) int64 {
	e.t.Helper()
	return e.exec(e.db, e.d.InboxInsert(e.tables.Inbox), k.consumer, k.source, k.id, "Type", e.tm(t0))
}

func TestStatementsInboxInsertClaimsAKeyOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		k := inboxKey{"billing/Handler", "sender", "m-1"}
		require.EqualValues(t, 1, e.insertKey(k), "a new key")
		require.EqualValues(t, 0, e.insertKey(k), "the same key again: a duplicate, no error")
		require.EqualValues(t, 0, e.execNative(e.d.InboxInsert(e.tables.Inbox), k.consumer, k.source, k.id, "Type", e.tm(t0)),
			"the same key through database/sql and native placeholders")
		require.EqualValues(t, 1, e.count("SELECT COUNT(*) FROM "+e.tables.Inbox))
		var status string
		var attempts, duplicates int
		e.scan("SELECT status, attempts, duplicates FROM "+e.tables.Inbox, nil, &status, &attempts, &duplicates)
		require.Equal(t, dialect.StatusDone, status, "a key of the transactional inbox is done from the start")
		require.Equal(t, 1, attempts)
		require.Equal(t, 0, duplicates)
	})
}

// Keys compare bytes exactly on every store: MySQL's default collation
// ignores case and trailing spaces.
func TestStatementsInboxKeysCompareBytes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		base := inboxKey{"c", "s", "key"}
		require.EqualValues(t, 1, e.insertKey(base))
		for _, k := range []inboxKey{
			{"c", "s", "KEY"},        // case
			{"c", "s", "Key"},        // case
			{"c", "s", "key "},       // trailing space
			{"c", "s", " key"},       // leading space
			{"C", "s", "key"},        // the consumer's case
			{"c ", "s", "key"},       // the consumer's trailing space
			{"c", "S", "key"},        // the source's case
			{"c", "s ", "key"},       // the source's trailing space
			{"c", "", "key"},         // no source
			{"other", "s", "key"},    // another consumer
			{"c", "s", "k\u00e9y"},   // é precomposed
			{"c", "s", "ke\u0301y"},  // é decomposed: other bytes
			{"c", "s", "k\u00c9y"},   // É
			{"c", "s", "key\u00a0"},  // a trailing no-break space
			{"c", "s", "ke\u200by"},  // a zero-width space
			{"c", "s", "\U0001F600"}, // outside the BMP (utf8mb3 cannot hold it)
		} {
			require.EqualValues(t, 1, e.insertKey(k), "%q is a key of its own", k)
			require.EqualValues(t, 0, e.insertKey(k), "%q again", k)
		}
		require.EqualValues(t, 0, e.insertKey(base))
		var id string
		e.scan("SELECT message_id FROM "+e.tables.Inbox+" WHERE consumer = ? AND source = ? AND message_id = ?",
			[]any{"c", "s", "key "}, &id)
		require.Equal(t, "key ", id, "read back byte for byte")
	})
}

// Every ID the bus accepts (up to 200 bytes, any valid UTF-8 but NUL)
// fits every key column.
func TestStatementsInboxKeysOf200Bytes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, s := range []string{strings.Repeat("x", 200), strings.Repeat("\u00e9", 100), strings.Repeat("\U0001F600", 50)} {
			require.Len(t, s, 200)
			require.True(t, dialect.ExactText(s))
			require.EqualValues(t, 1, e.insertKey(inboxKey{s, s, s}))
			require.EqualValues(t, 0, e.insertKey(inboxKey{s, s, s}))
			var id string
			e.scan("SELECT message_id FROM "+e.tables.Inbox+" WHERE consumer = ?", []any{s}, &id)
			require.Equal(t, s, id)
		}
	})
}

// A duplicate does not abort the transaction it runs in (PostgreSQL aborts
// one on a unique violation): the transaction goes on and commits.
func TestStatementsInboxDuplicateKeepsTheTransaction(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		k := inboxKey{"c", "s", "m"}
		require.EqualValues(t, 1, e.insertKey(k))
		tx := e.begin()
		require.EqualValues(t, 0, e.exec(tx, e.d.InboxInsert(e.tables.Inbox), k.consumer, k.source, k.id, "Type", e.tm(t0)))
		require.EqualValues(t, 0, e.exec(tx, e.d.InboxInsertMany(e.tables.Inbox, 1), k.consumer, k.source, k.id, "Type", e.tm(t0)))
		require.EqualValues(t, 0, e.exec(tx, e.d.InboxInsertLogged(e.tables.Inbox), k.consumer, k.source, k.id, "Type", e.tm(t0), "sum", []byte("p")))
		require.EqualValues(t, 1, e.exec(tx, e.d.InboxInsert(e.tables.Inbox), k.consumer, k.source, "m2", "Type", e.tm(t0)))
		require.NoError(t, tx.Commit().Error)
		require.EqualValues(t, 2, e.count("SELECT COUNT(*) FROM "+e.tables.Inbox))
	})
}

// InboxInsertMany affects one row per new key, leaving those there.
func TestStatementsInboxInsertManyCountsNewKeys(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.EqualValues(t, 1, e.insertKey(inboxKey{"c", "s", "b"}))
		require.EqualValues(t, 1, e.insertKey(inboxKey{"c", "s", "d"}))
		var args []any
		for _, id := range []string{"a", "b", "B", "c", "d", "d "} {
			args = append(args, "c", "s", id, "Type", e.tm(t0))
		}
		require.EqualValues(t, 4, e.exec(e.db, e.d.InboxInsertMany(e.tables.Inbox, 6), args...), "a, B, c and \"d \" are new")
		require.EqualValues(t, 0, e.exec(e.db, e.d.InboxInsertMany(e.tables.Inbox, 6), args...), "all of them again")
		require.EqualValues(t, 6, e.count("SELECT COUNT(*) FROM "+e.tables.Inbox))
		require.Equal(t, []string{"B", "a", "b", "c", "d", "d "}, e.strings("SELECT message_id FROM "+e.tables.Inbox+" ORDER BY message_id"),
			"ordered by bytes")
		require.EqualValues(t, 1, e.execNative(e.d.InboxInsertMany(e.tables.Inbox, 2), "c", "s", "a", "Type", e.tm(t0), "c", "s", "e", "Type", e.tm(t0)))
	})
}

// InboxInsertLogged stores the checksum and the payload (NULL allowed),
// and leaves a key there as it was.
func TestStatementsInboxInsertLoggedKeepsThePayload(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		q := e.d.InboxInsertLogged(e.tables.Inbox)
		payload := []byte{0, 1, 2, 0xff, 'x'}
		require.EqualValues(t, 1, e.exec(e.db, q, "c", "s", "m1", "Type", e.tm(t0), "sum1", payload))
		require.EqualValues(t, 1, e.exec(e.db, q, "c", "s", "m2", "Type", e.tm(t0), "sum2", nil))
		require.EqualValues(t, 0, e.exec(e.db, q, "c", "s", "m1", "Type", e.tm(t0), "other", []byte("other")))
		var sum string
		var got []byte
		e.scan("SELECT checksum, payload FROM "+e.tables.Inbox+" WHERE message_id = ?", []any{"m1"}, &sum, &got)
		require.Equal(t, "sum1", sum)
		require.Equal(t, payload, got, "the first copy's payload, byte for byte")
		e.scan("SELECT checksum, payload FROM "+e.tables.Inbox+" WHERE message_id = ?", []any{"m2"}, &sum, &got)
		require.Equal(t, "sum2", sum)
		require.Nil(t, got)
	})
}

// InboxCountDuplicate adds one to a key's duplicates; InboxCountDone only
// to a key that is done.
func TestStatementsInboxCountsDuplicates(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		k := inboxKey{"c", "s", "m"}
		require.EqualValues(t, 1, e.insertKey(k))
		require.EqualValues(t, 1, e.exec(e.db, e.d.InboxCountDuplicate(e.tables.Inbox), k.consumer, k.source, k.id))
		require.EqualValues(t, 1, e.execNative(e.d.InboxCountDuplicate(e.tables.Inbox), k.consumer, k.source, k.id))
		require.EqualValues(t, 1, e.execNative(e.d.InboxCountDone(e.tables.Inbox), k.consumer, k.source, k.id))
		require.EqualValues(t, 0, e.exec(e.db, e.d.InboxCountDuplicate(e.tables.Inbox), k.consumer, k.source, "M"), "no such key")
		require.EqualValues(t, 3, e.count("SELECT duplicates FROM "+e.tables.Inbox+" WHERE message_id = ?", "m"))

		claim := e.d.ClaimInsert(e.tables.Inbox)
		require.EqualValues(t, 1, e.exec(e.db, claim, "c", "s", "p", "Type", e.tm(t0), e.tm(t0), "", nil))
		require.EqualValues(t, 0, e.exec(e.db, e.d.InboxCountDone(e.tables.Inbox), "c", "s", "p"), "a claim being processed is not done")
		require.EqualValues(t, 0, e.count("SELECT duplicates FROM "+e.tables.Inbox+" WHERE message_id = ?", "p"))
		require.EqualValues(t, 1, e.exec(e.db, e.d.InboxCountDuplicate(e.tables.Inbox), "c", "s", "p"), "counted whatever its status")
	})
}

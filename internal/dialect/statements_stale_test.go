package dialect_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/sqlite"
)

// watermark is a stale-update watermark's version and message ID.
type watermark struct {
	version int64
	id      string
}

// newer reports whether w wins over stored: a greater version, or the
// same version and a message ID greater byte for byte (Go compares
// strings by bytes).
func (w watermark) newer(stored watermark) bool {
	return w.version > stored.version || w.version == stored.version && w.id > stored.id
}

// upsert runs WatermarkUpsert as the stale middleware does (database/sql,
// native placeholders) and reports whether it applied.
func (e *env) upsert(consumer, entity string, w watermark, at time.Time) bool {
	e.t.Helper()
	return e.execNative(e.d.WatermarkUpsert(e.tables.Watermarks), consumer, "Type", entity, w.version, w.id, e.tm(at)) > 0
}

// readWatermark runs WatermarkRead.
func (e *env) readWatermark(consumer, entity string) watermark {
	e.t.Helper()
	var w watermark
	e.scan(e.d.WatermarkRead(e.tables.Watermarks), []any{consumer, "Type", entity}, &w.version, &w.id)
	return w
}

func TestStatementsWatermarkUpsertAppliesOnlyNewer(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		v := time.Date(2030, 1, 1, 0, 0, 0, 123456789, time.UTC).UnixNano() // a version as the middleware binds it
		require.True(t, e.upsert("c", "e", watermark{v, "m5"}, t0), "the first update of an entity")
		require.Equal(t, watermark{v, "m5"}, e.readWatermark("c", "e"))

		require.False(t, e.upsert("c", "e", watermark{v - 1, "z"}, t0.Add(time.Hour)), "an older version, whatever its ID")
		require.False(t, e.upsert("c", "e", watermark{v, "m5"}, t0.Add(time.Hour)), "the same update again")
		require.Equal(t, watermark{v, "m5"}, e.readWatermark("c", "e"))
		var updated any
		e.scan("SELECT updated_at FROM "+e.tables.Watermarks, nil, &updated)
		require.Equal(t, t0.Truncate(time.Microsecond), e.parse(updated), "a refused update leaves updated_at")

		require.True(t, e.upsert("c", "e", watermark{v + 1, "a"}, t0.Add(2*time.Hour)), "a newer version, whatever its ID")
		require.Equal(t, watermark{v + 1, "a"}, e.readWatermark("c", "e"))
		e.scan("SELECT updated_at FROM "+e.tables.Watermarks, nil, &updated)
		require.Equal(t, t0.Add(2*time.Hour).Truncate(time.Microsecond), e.parse(updated), "an applied update sets updated_at")

		require.True(t, e.upsert("c", "e", watermark{v + 1, "b"}, t0), "the same version, a greater ID")
		require.False(t, e.upsert("c", "e", watermark{v + 1, "a"}, t0), "the same version, a smaller ID")
		require.Equal(t, watermark{v + 1, "b"}, e.readWatermark("c", "e"))
		require.EqualValues(t, 1, e.count("SELECT COUNT(*) FROM "+e.tables.Watermarks), "one row per entity")
	})
}

// Ties on version break by message ID compared as bytes, the same on
// every store: a case-insensitive or locale collation orders these pairs
// the other way, or finds them equal.
func TestStatementsWatermarkTieBreaksByBytes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for i, pair := range [][2]string{
			{"a", "B"},            // 'B' < 'a' in bytes; b > a ignoring case
			{"B", "a"},            // and the other way round
			{"a", "a "},           // a trailing space is greater; PAD SPACE finds them equal
			{"a", "A"},            // equal ignoring case
			{"z", "\u00e9"},       // é (0xC3 0xA9) > z in bytes; before z in most locales
			{"\u00e9", "f"},       // f < é in bytes
			{"ab", "a-c"},         // a locale ignores '-'
			{"e\u0301", "\u00e9"}, // decomposed é < precomposed é in bytes
			{"10", "9"},           // text, not numbers
		} {
			entity := fmt.Sprint("e", i)
			first, second := watermark{7, pair[0]}, watermark{7, pair[1]}
			require.True(t, e.upsert("c", entity, first, t0))
			require.Equal(t, second.newer(first), e.upsert("c", entity, second, t0), "%q after %q", second.id, first.id)
			want := first
			if second.newer(first) {
				want = second
			}
			require.Equal(t, want, e.readWatermark("c", entity), "%q and %q", first.id, second.id)
		}
	})
}

// Every order of arrival converges on the greatest (version, message ID),
// and exactly the updates newer than every one before them apply.
func TestStatementsWatermarkEveryOrderConverges(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		updates := []watermark{{5, "b"}, {5, "B"}, {4, "z"}, {5, "b "}, {6, "A"}}
		perms := permutations(len(updates))
		for n, perm := range perms {
			entity := fmt.Sprint("entity-", n)
			var best watermark
			for i, j := range perm {
				u := updates[j]
				wantApplied := i == 0 || u.newer(best)
				require.Equal(t, wantApplied, e.upsert("c", entity, u, t0), "order %v, update %v", perm, u)
				if wantApplied {
					best = u
				}
			}
			require.Equal(t, watermark{6, "A"}, e.readWatermark("c", entity), "order %v", perm)
		}
	})
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int{}, p[:at]...), n-1), p[at:]...)
			out = append(out, q)
		}
	}
	return out
}

// A watermark belongs to one consumer, message type and entity, compared
// as bytes.
func TestStatementsWatermarkKeys(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.True(t, e.upsert("c", "e", watermark{10, "m"}, t0))
		require.True(t, e.upsert("C", "e", watermark{1, "m"}, t0), "another consumer keeps its own")
		require.True(t, e.upsert("c ", "e", watermark{1, "m"}, t0))
		require.True(t, e.upsert("c", "E", watermark{1, "m"}, t0), "another entity, alike but for case")
		require.True(t, e.upsert("c", "e ", watermark{1, "m"}, t0))
		require.EqualValues(t, 1, e.exec(e.db, e.d.WatermarkUpsert(e.tables.Watermarks), "c", "type", "e", 1, "m", e.tm(t0)), "another message type")
		require.Equal(t, watermark{10, "m"}, e.readWatermark("c", "e"))
		require.EqualValues(t, 6, e.count("SELECT COUNT(*) FROM "+e.tables.Watermarks))
	})
}

// WatermarkRead, in the transaction whose upsert found the stored
// watermark newer, reads the watermark as it is now: on MySQL's REPEATABLE
// READ a plain read returns the transaction's snapshot, taken before
// another instance stored a newer one.
func TestStatementsWatermarkReadSeesTheLatest(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.d == (sqlite.Dialect{}) {
			t.Skip("SQLite has one connection, one writer: no other transaction can write meanwhile")
		}
		require.True(t, e.upsert("c", "e", watermark{1, "a"}, t0))
		tx := e.begin()
		var snapshot int64
		require.NoError(t, tx.Raw("SELECT version_at FROM "+e.tables.Watermarks+" WHERE consumer = ?", "c").Row().Scan(&snapshot))
		require.EqualValues(t, 1, snapshot)
		require.True(t, e.upsert("c", "e", watermark{3, "c"}, t0), "another instance stores a newer one")
		require.EqualValues(t, 0, e.exec(tx, e.d.WatermarkUpsert(e.tables.Watermarks), "c", "Type", "e", 2, "b", e.tm(t0)), "2 is stale now")
		var w watermark
		require.NoError(t, tx.Raw(e.d.WatermarkRead(e.tables.Watermarks), "c", "Type", "e").Row().Scan(&w.version, &w.id))
		require.Equal(t, watermark{3, "c"}, w, "the watermark that made the update stale")
		require.NoError(t, tx.Commit().Error)
	})
}

// Updates of one entity racing from many connections leave the newest,
// each winning update applied once (contention retried as the bus does).
func TestStatementsWatermarkConcurrentUpdatesConverge(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.True(t, e.upsert("c", "e", watermark{0, ""}, t0))
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := dialect.ExecContended(context.Background(), e.db, e.d.WatermarkUpsert(e.tables.Watermarks),
					"c", "Type", "e", int64(i%4), fmt.Sprint("m", i), e.tm(t0))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, watermark{3, "m7"}, e.readWatermark("c", "e"), "version 3: m3, m7, m11, m15; m7 is the greatest in bytes")
	})
}

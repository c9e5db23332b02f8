package dialect_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
)

// Count adds one to a message's count per consumer (1 for its first
// row), Read reads it, Forget deletes it; keys compare bytes.
func TestStatementsDeliveriesCount(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s, err := e.d.Deliveries(dialect.DeliveriesTableDefault)
		require.NoError(t, err)
		read := func(consumer, id string) (int64, error) {
			var n int64
			err := e.db.Raw(s.Read, consumer, id).Row().Scan(&n)
			return n, err
		}
		_, err = read("c", "m")
		require.ErrorIs(t, err, sql.ErrNoRows, "never counted")
		for want := int64(1); want <= 3; want++ {
			e.exec(e.db, s.Count, "c", "m", e.tm(t0))
			n, err := read("c", "m")
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		e.exec(e.db, s.Count, "C", "m", e.tm(t0))
		e.exec(e.db, s.Count, "c", "m ", e.tm(t0))
		e.exec(e.db, s.Count, "c", "M", e.tm(t0))
		for _, k := range [][2]string{{"C", "m"}, {"c", "m "}, {"c", "M"}} {
			n, err := read(k[0], k[1])
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "%q counts on its own", k)
		}
		var updated any
		e.scan("SELECT updated_at FROM "+dialect.DeliveriesTableDefault+" WHERE consumer = ? AND message_id = ?", []any{"c", "m"}, &updated)
		require.Equal(t, e.parse(e.tm(t0)), e.parse(updated))
		e.exec(e.db, s.Count, "c", "m", e.tm(t0.Add(1e9)))
		e.scan("SELECT updated_at FROM "+dialect.DeliveriesTableDefault+" WHERE consumer = ? AND message_id = ?", []any{"c", "m"}, &updated)
		require.Equal(t, e.parse(e.tm(t0.Add(1e9))), e.parse(updated), "a count moves updated_at")

		require.EqualValues(t, 1, e.exec(e.db, s.Forget, "c", "m"))
		require.EqualValues(t, 0, e.exec(e.db, s.Forget, "c", "m"))
		_, err = read("c", "m")
		require.ErrorIs(t, err, sql.ErrNoRows)
		e.exec(e.db, s.Count, "c", "m", e.tm(t0))
		n, err := read("c", "m")
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "counted from 1 again")
	})
}

// Counts racing from many connections lose none.
func TestStatementsDeliveriesConcurrentCounts(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		s, err := e.d.Deliveries(dialect.DeliveriesTableDefault)
		require.NoError(t, err)
		const n = 20
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := dialect.ExecContended(context.Background(), e.db, s.Count, "c", "m", e.tm(t0))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, n, e.count(s.Read, "c", "m"))
	})
}

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/mysql"
	"github.com/postroom/postroom/internal/dialect/postgres"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/outbox"
)

func TestMain(m *testing.M) {
	// gorm's prepared-statement cache (Session{PrepareStmt}) starts an
	// expiry goroutine that it never stops (gorm/internal/lru).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"),
		// Watermill's router leaves this goroutine for good when its Run
		// failed at a subscribe (TestCloseOfARelayWhoseSubscribeFailed):
		// it waits for handlers that never started.
		goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/message.(*Router).watchAllHandlersStopped.func1"))
}

// TestReturnedMessagesCommitThenRelay, on PostgreSQL and MariaDB: messages
// a plain Watermill handler returns are queued with its transaction (none on
// rollback), show in the backlog, and are relayed with their own IDs and
// without the outbox's own reach metadata ("postroom-outbox-reach"), which is the relay's
// business, not the subscriber's (caught the relay leaving it on).
func TestReturnedMessagesCommitThenRelay(t *testing.T) {
	for _, db := range testenv.ServerDatabases {
		t.Run(db.Name, func(t *testing.T) {
			gorm := db.Open(t)
			broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			defer broker.Close()
			o, err := outbox.New(outbox.Config{DB: gorm, Destination: broker, PollInterval: 10 * time.Millisecond,
				Reach: "memory@returned"}) // the messages are written with "postroom-outbox-reach"
			require.NoError(t, err)
			uow, err := unitofwork.New(unitofwork.Config{DB: gorm})
			require.NoError(t, err)
			handler := func(fail bool) message.HandlerFunc {
				return uow(outbox.Returned(o, "shipped")(func(msg *message.Message) ([]*message.Message, error) {
					out := []*message.Message{message.NewMessage(msg.UUID+"-a", nil), message.NewMessage(msg.UUID+"-b", nil)}
					if fail {
						return out, errors.New("refused")
					}
					return out, nil
				}))
			}
			ctx := context.Background()
			_, err = handler(true)(message.NewMessage("o-1", nil))
			require.Error(t, err)
			backlog, err := o.Backlog(ctx)
			require.NoError(t, err)
			require.Zero(t, backlog.Messages, "a rolled-back handler queued nothing")

			_, err = handler(false)(message.NewMessage("o-2", nil))
			require.NoError(t, err)
			backlog, err = o.Backlog(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 2, backlog.Messages)

			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- o.Run(runCtx) }()
			received, err := broker.Subscribe(runCtx, "shipped")
			require.NoError(t, err)
			var ids []string
			for len(ids) < 2 {
				select {
				case m := <-received:
					m.Ack()
					ids = append(ids, m.UUID)
					require.NotContains(t, m.Metadata, "postroom-outbox-reach", "the relay takes its reach metadata off")
				case <-time.After(20 * time.Second):
					t.Fatal("relay did not publish")
				}
			}
			require.ElementsMatch(t, []string{"o-2-a", "o-2-b"}, ids, "relayed with their own IDs")
			require.Eventually(t, func() bool {
				b, err := o.Backlog(ctx)
				return err == nil && b.Messages == 0
			}, 10*time.Second, 20*time.Millisecond)
			stop()
			require.NoError(t, <-done)
			require.NoError(t, o.Close())
		})
	}
}

// TestPublishJoinsAPreparedStatementTransaction, on PostgreSQL and MariaDB:
// with gorm's PrepareStmt the handler's transaction is a
// *gorm.PreparedStmtTX; Publish writes through it like any other.
func TestPublishJoinsAPreparedStatementTransaction(t *testing.T) {
	for _, db := range testenv.ServerDatabases {
		t.Run(db.Name, func(t *testing.T) {
			prepared := db.Open(t).Session(&gorm.Session{PrepareStmt: true})
			broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			defer broker.Close()
			o, err := outbox.New(outbox.Config{DB: prepared, Destination: broker})
			require.NoError(t, err)
			msg := message.NewMessage("prepared-1", []byte("{}"))
			_, err = unitofwork.Run(prepared, msg, func(msg *message.Message) ([]*message.Message, error) {
				return nil, o.Publish(msg.Context(), unitofwork.Tx(msg.Context()), "shipped", msg)
			})
			require.NoError(t, err, "Publish found the transaction under gorm's prepared-statement wrapper")
			backlog, err := o.Backlog(context.Background())
			require.NoError(t, err)
			require.EqualValues(t, 1, backlog.Messages)
		})
	}
}

// TestRunCreatesATopicsTablesAsMigrateDoes, on PostgreSQL and MariaDB: a
// relay on a topic of its own, whose tables Migrate did not create, creates
// them at Run with the columns and indexes of the migrated outbox's (on
// MySQL the acked column and the index of the relay's query), and relays.
func TestRunCreatesATopicsTablesAsMigrateDoes(t *testing.T) {
	for _, db := range testenv.ServerDatabases {
		t.Run(db.Name, func(t *testing.T) {
			gdb := db.Open(t)
			d, err := dialects.Of(gdb)
			require.NoError(t, err)
			const topic = "own_outbox"
			broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			defer broker.Close()
			o, err := outbox.New(outbox.Config{DB: gdb, Destination: broker, Topic: topic, PollInterval: 10 * time.Millisecond})
			require.NoError(t, err)
			require.Error(t, gdb.Exec(d.OutboxTablesExist(topic)).Error, "no tables before Run")

			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			received, err := broker.Subscribe(ctx, "shipped")
			require.NoError(t, err)
			require.Eventually(t, func() bool { return gdb.Exec(d.OutboxTablesExist(topic)).Error == nil }, 20*time.Second, 10*time.Millisecond)
			msg := message.NewMessage("own-1", []byte("{}"))
			_, err = unitofwork.Run(gdb, msg, func(msg *message.Message) ([]*message.Message, error) {
				return nil, o.Publish(msg.Context(), unitofwork.Tx(msg.Context()), "shipped", msg)
			})
			require.NoError(t, err)
			select {
			case m := <-received:
				m.Ack()
				require.Equal(t, "own-1", m.UUID)
			case <-time.After(20 * time.Second):
				t.Fatal("relay did not publish")
			}
			stop()
			require.NoError(t, <-done)
			require.NoError(t, o.Close())

			schema := map[dialect.Dialect]string{postgres.Dialect{}: "current_schema()", mysql.Dialect{}: "DATABASE()"}[d]
			columns := func(table string) []string {
				var out []string
				require.NoError(t, gdb.Raw("SELECT CONCAT(column_name, ' ', data_type, ' ', is_nullable, ' ', COALESCE(character_maximum_length, 0))"+
					" FROM information_schema.columns WHERE table_schema = "+schema+" AND table_name = ? ORDER BY ordinal_position", table).Scan(&out).Error)
				return out
			}
			indexes := func(table string) []string {
				var out []string
				q := "SELECT DISTINCT CONCAT(index_name, ' ', column_name, ' ', seq_in_index) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? ORDER BY 1"
				if d == (postgres.Dialect{}) {
					q = "SELECT replace(indexdef, indexname, '') FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ? ORDER BY 1"
				}
				require.NoError(t, gdb.Raw(q, table).Scan(&out).Error)
				for i := range out {
					out[i] = strings.ReplaceAll(out[i], topic, dialect.OutboxTopicDefault)
				}
				return out
			}
			for _, table := range []string{"watermill_%s", "watermill_offsets_%s"} {
				own, migrated := fmt.Sprintf(table, topic), fmt.Sprintf(table, dialect.OutboxTopicDefault)
				if d == (mysql.Dialect{}) && table == "watermill_offsets_%s" {
					continue // the relay acks row by row on MySQL: no offsets
				}
				require.NotEmpty(t, columns(migrated))
				require.Equal(t, columns(migrated), columns(own), table)
				require.Equal(t, indexes(migrated), indexes(own), table)
			}
			if d == (mysql.Dialect{}) {
				require.Contains(t, indexes("watermill_"+topic), "postroom_outbox_acked acked 1", "the index of the relay's query")
			}
		})
	}
}

// TestCloseOfARelayThatNeverRan returns at once, and a Run after it does
// not relay. Watermill's router, closed without having run, waits its
// whole close timeout (30 s) for handlers that never started: a program
// that made a bus with an outbox and gave up before running it (or whose
// relay failed to start) hung that long in Close.
func TestCloseOfARelayThatNeverRan(t *testing.T) {
	o := newRelay(t)
	closeWithin(t, o, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, o.Run(ctx), "a Run after Close returns at once")
	require.NoError(t, ctx.Err(), "a Run after Close returned only at its context's end")
}

// TestCloseOfARelayWhoseSubscribeFailed returns at once: Run stopped
// while starting (its context cancelled, as by a SIGTERM at startup) fails
// at the relay's subscribe on PostgreSQL, and Watermill's router, whose
// handler never started, would wait its whole close timeout (30 s) in
// Close.
func TestCloseOfARelayWhoseSubscribeFailed(t *testing.T) {
	o := newRelay(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, o.Run(ctx))
	closeWithin(t, o, 5*time.Second)
}

// newRelay is an outbox on a fresh PostgreSQL schema relaying to memory.
func newRelay(t *testing.T) *outbox.Outbox {
	broker := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = broker.Close() })
	o, err := outbox.New(outbox.Config{DB: testenv.Postgres(t), Destination: broker})
	require.NoError(t, err)
	return o
}

// closeWithin closes o, failing the test if that takes more than d.
func closeWithin(t *testing.T, o *outbox.Outbox, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- o.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(d):
		t.Fatalf("Close took more than %s", d)
	}
}

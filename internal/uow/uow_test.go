package uow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
)

// TestTransactionBeginsAtFirstUse: a handler that calls out before it
// writes holds no connection meanwhile. With a pool of one connection, the
// handler's own use of the pool before its first write would wait forever
// for a transaction begun up front.
func TestTransactionBeginsAtFirstUse(t *testing.T) {
	db := testenv.Postgres(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)

	msg := message.NewMessage("m-1", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg.SetContext(ctx)
	_, err = uow.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		// Something else needs the pool while the handler calls out.
		var one int
		if err := db.WithContext(msg.Context()).Raw("SELECT 1").Scan(&one).Error; err != nil {
			return nil, err
		}
		return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES ('m-1')").Error
	})
	require.NoError(t, err)

	// A rollback-only or failing unit that never wrote leaves nothing open.
	_, err = uow.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		return nil, errors.New("failed before any write")
	})
	require.Error(t, err)
	var n int64
	require.NoError(t, db.WithContext(ctx).Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
	require.EqualValues(t, 1, n)
	require.False(t, uow.Active(msg.Context()), "the message's context is given back")
}

// TestUnitOfWorkKeepsGormsTransactionSettings: the unit of work begins and
// commits on the driver's transaction itself, so it must do what gorm's
// Begin does with the pool gorm holds: prepared statements
// (Session{PrepareStmt}) and DefaultTransactionTimeout.
func TestUnitOfWorkKeepsGormsTransactionSettings(t *testing.T) {
	base := testenv.Postgres(t)
	require.NoError(t, base.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	count := func() (n int64) {
		require.NoError(t, base.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
		return n
	}
	run := func(db *gorm.DB, id string, between func()) error {
		msg := message.NewMessage(id, nil)
		_, err := uow.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
			if _, err := uow.Exec(msg.Context(), "INSERT INTO effects (id) VALUES ($1)", id+"-raw"); err != nil {
				return nil, err
			}
			between() // the transaction has begun
			return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", id).Error
		})
		return err
	}

	prepared := base.Session(&gorm.Session{PrepareStmt: true})
	require.NoError(t, run(prepared, "p-1", func() {}))
	require.EqualValues(t, 2, count(), "both writes committed through gorm's prepared-statement pool")

	timed := base.Session(&gorm.Session{})
	timed.Config.DefaultTransactionTimeout = 50 * time.Millisecond
	err := run(timed, "t-1", func() { time.Sleep(200 * time.Millisecond) })
	require.Error(t, err, "the transaction outlived DefaultTransactionTimeout")
	require.EqualValues(t, 2, count(), "nothing of the timed-out unit was kept")
	require.NoError(t, run(timed, "t-2", func() {}))
	require.EqualValues(t, 4, count())
}

// TestSwallowedErrorFailsItsMemberAlone: on PostgreSQL a statement error
// a handler swallows leaves the transaction aborted until a rollback to a
// savepoint. Whether it runs first, between the others or last (its
// savepoint released with the next member's SAVEPOINT, or before the
// COMMIT), the one that swallowed it fails alone (its
// savepoint is not released, and is rolled back) and the two others
// commit; with gorm's prepared-statement pool too.
func TestSwallowedErrorFailsItsMemberAlone(t *testing.T) {
	base := testenv.Postgres(t)
	require.NoError(t, base.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	for round := range 6 {
		db := base
		if round >= 3 {
			db = base.Session(&gorm.Session{PrepareStmt: true})
		}
		mw, err := uow.New(uow.Config{DB: db, BatchSize: 3, BatchWait: 5 * time.Second})
		require.NoError(t, err)
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			tx := uow.Tx(msg.Context())
			if err := tx.Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error; err != nil {
				return nil, err
			}
			if strings.HasPrefix(msg.UUID, "bad") {
				_ = tx.Exec("INSERT INTO no_such_table VALUES (1)").Error // swallowed
			}
			return nil, nil
		})
		errs := make(chan error, 3)
		order := slices.Insert([]string{"a", "b"}, round%3, "bad") // first, between, last
		for _, id := range order {
			id = fmt.Sprintf("%s-%d", id, round)
			time.Sleep(20 * time.Millisecond) // they run in this order
			go func() {
				msg := message.NewMessage(id, nil)
				_, err := h(msg)
				if err != nil {
					err = fmt.Errorf("%s: %w", id, err)
				}
				errs <- err
			}()
		}
		var failed []error
		for range 3 {
			if err := <-errs; err != nil {
				failed = append(failed, err)
			}
		}
		require.Len(t, failed, 1)
		require.ErrorIs(t, failed[0], uow.ErrSavepointAborted)
		require.ErrorContains(t, failed[0], "bad-")
		var ids []string
		require.NoError(t, base.Raw("SELECT id FROM effects WHERE id LIKE ? ORDER BY id", fmt.Sprintf("%%-%d", round)).Scan(&ids).Error)
		require.Equal(t, []string{fmt.Sprintf("a-%d", round), fmt.Sprintf("b-%d", round)}, ids)
	}
}

// TestBatchMembersWaitForTheCommit: a member's Run returns only once its
// batch has committed, so the message is acked after its writes are
// durable; a member that fails is rolled back alone.
func TestBatchMembersWaitForTheCommit(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *gorm.DB{"sqlite": testenv.SQLite, "postgres": testenv.Postgres, "mariadb": testenv.MySQL} {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
			mw, err := uow.New(uow.Config{DB: db, BatchSize: 4, BatchWait: 200 * time.Millisecond})
			require.NoError(t, err)
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				if err := uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error; err != nil {
					return nil, err
				}
				if msg.UUID == "fails" {
					return nil, errors.New("fails after its write")
				}
				return nil, nil
			})
			count := func() (n int64) {
				require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
				return n
			}
			type result struct {
				id  string
				err error
				n   int64 // rows committed when Run returned
			}
			results := make(chan result, 3)
			for _, id := range []string{"a", "fails", "b"} {
				go func() {
					_, err := h(message.NewMessage(id, nil))
					results <- result{id, err, count()}
				}()
			}
			for range 3 {
				r := <-results
				if r.id == "fails" {
					require.Error(t, r.err)
					continue
				}
				require.NoError(t, r.err)
				require.EqualValues(t, 2, r.n, "%s returned before its batch committed", r.id)
			}
			require.EqualValues(t, 2, count())
		})
	}
}

// TestBatchOfOneMessageAtATimeDoesNotWait: with InFlight saying no other
// message is on its way, a batch commits as soon as its one member has
// run, not after BatchWait (a minute here: the test would time out).
func TestBatchOfOneMessageAtATimeDoesNotWait(t *testing.T) {
	db := testenv.SQLite(t)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	mw, err := uow.New(uow.Config{DB: db, BatchSize: 100, BatchWait: time.Minute, InFlight: func() int { return 1 }})
	require.NoError(t, err)
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		return nil, uow.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error
	})
	done := make(chan error, 1)
	go func() {
		for _, id := range []string{"a", "b", "c"} {
			if _, err := h(message.NewMessage(id, nil)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("a batch of one message waited for others that were not coming")
	}
	var n int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
	require.EqualValues(t, 3, n)
}

// TestATransactionThatDoesNotCommitIsNotAcked, on every store, a
// transaction per message and a batch alike: when the COMMIT fails (a
// deferred constraint PostgreSQL and SQLite check only then) or the
// connection dies
// after the handler's writes, the handler chain returns the error, so the
// message is not acked and its redelivery writes the effect once. A
// failure taken for success would ack a message whose effects were never
// written.
func TestATransactionThatDoesNotCommitIsNotAcked(t *testing.T) {
	for _, database := range testenv.Databases {
		// MySQL checks every constraint at once, and SQLite's connection
		// is a file handle no other session can end.
		breaks := map[string][]string{"postgres": {"connection killed", "deferred constraint"},
			"mariadb": {"connection killed"}, "sqlite": {"deferred constraint"}}[database.Name]
		for _, breaking := range breaks {
			for _, batch := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/%s/batch size %d", database.Name, breaking, batch), func(t *testing.T) {
					db := database.Open(t)
					require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
					if breaking == "deferred constraint" {
						require.NoError(t, db.Exec("CREATE TABLE parents (id VARCHAR(20) PRIMARY KEY)").Error)
						require.NoError(t, db.Exec("CREATE TABLE orphans (parent VARCHAR(20) REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)").Error)
					}
					mw, err := uow.New(uow.Config{DB: db, BatchSize: batch, BatchWait: time.Millisecond})
					require.NoError(t, err)
					first := true
					h := mw(func(msg *message.Message) ([]*message.Message, error) {
						tx := uow.Tx(msg.Context())
						if err := tx.Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error; err != nil {
							return nil, err
						}
						if !first {
							return nil, nil
						}
						first = false
						if breaking == "deferred constraint" {
							return nil, tx.Exec("INSERT INTO orphans (parent) VALUES ('none')").Error // fails at COMMIT
						}
						killConnection(t, db, tx, database.Name)
						return nil, nil
					})
					_, err = h(message.NewMessage("m-1", nil))
					require.Error(t, err, "the transaction did not commit, and so the message fails")
					var n int64
					require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
					require.Zero(t, n, "nothing was committed")

					_, err = h(message.NewMessage("m-1", nil)) // the redelivery
					require.NoError(t, err)
					require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
					require.EqualValues(t, 1, n)
				})
			}
		}
	}
}

// killConnection ends, from another connection of db, the server session
// of the transaction tx, and waits until the server has let it go.
func killConnection(t *testing.T, db, tx *gorm.DB, store string) {
	t.Helper()
	var id int64
	var kill, gone string
	switch store {
	case "postgres":
		require.NoError(t, tx.Raw("SELECT pg_backend_pid()").Scan(&id).Error)
		kill, gone = fmt.Sprintf("SELECT pg_terminate_backend(%d)", id), "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?"
	default:
		require.NoError(t, tx.Raw("SELECT CONNECTION_ID()").Scan(&id).Error)
		kill, gone = fmt.Sprintf("KILL CONNECTION %d", id), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	}
	require.NoError(t, db.Exec(kill).Error)
	require.Eventually(t, func() bool {
		var n int64
		return db.Raw(gone, id).Scan(&n).Error == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "the session was not ended")
}

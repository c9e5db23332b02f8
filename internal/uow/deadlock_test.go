package uow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/internal/uow"
)

// TestSwallowedDeadlockWithBatch: the third member of a WithBatch batch
// hits a deadlock and swallows its error (as
// TestSwallowedErrorFailsItsMemberAlone swallows a bad statement). On
// MariaDB InnoDB rolls back the whole transaction (members a and b
// included) and forgets every savepoint; the member's RELEASE SAVEPOINT
// then fails, and the batch breaks: a and b are retried, not acked with
// their writes gone (which they were when the release ran on PostgreSQL
// only). On PostgreSQL x fails alone.
func TestSwallowedDeadlockWithBatch(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *gorm.DB{"postgres": testenv.Postgres, "mariadb": testenv.MySQL} {
		t.Run(name, func(t *testing.T) {
			db := deadlockTables(t, open)
			mw, err := uow.New(uow.Config{DB: db, BatchSize: 3, BatchWait: time.Minute})
			require.NoError(t, err)
			ran := make(chan string, 3)
			var swallowed error
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				tx := uow.Tx(msg.Context())
				if msg.UUID != "x" {
					err := tx.Exec("INSERT INTO effects (id) VALUES (?)", msg.UUID).Error
					ran <- msg.UUID
					return nil, err
				}
				// x: a deadlock with another transaction, its error swallowed.
				swallowed = swallowDeadlock(t, msg.Context(), db)
				_ = tx.Exec("INSERT INTO effects (id) VALUES ('x-after')").Error
				t.Logf("batch's deadlock error (swallowed): %v", swallowed)
				return nil, nil
			})
			type result struct {
				id  string
				err error
			}
			results := make(chan result, 3)
			start := func(id string) {
				go func() {
					_, err := h(message.NewMessage(id, nil))
					results <- result{id, err}
				}()
			}
			start("a")
			<-ran
			start("b")
			<-ran
			start("x")
			acked := map[string]bool{}
			for range 3 {
				select {
				case r := <-results:
					t.Logf("%s: %v", r.id, r.err)
					acked[r.id] = r.err == nil
				case <-time.After(30 * time.Second):
					t.Fatal("the batch did not end")
				}
			}
			require.Error(t, swallowed, "no deadlock happened: the scenario did not run")
			var ids []string
			require.NoError(t, db.Raw("SELECT id FROM effects ORDER BY id").Scan(&ids).Error)
			t.Logf("committed: %v", ids)
			for _, id := range []string{"a", "b"} {
				if acked[id] {
					require.Contains(t, ids, id, fmt.Sprintf("%s was acked but its write did not commit (message loss)", id))
				}
			}
		})
	}
}

// deadlockTables opens a database of the store with the tables of the
// deadlock tests.
func deadlockTables(t *testing.T, open func(testing.TB) *gorm.DB) *gorm.DB {
	db := open(t)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	require.NoError(t, db.Exec("CREATE TABLE locks (id INT PRIMARY KEY, v INT NOT NULL)").Error)
	require.NoError(t, db.Exec("CREATE TABLE heavy (id INT NOT NULL)").Error)
	require.NoError(t, db.Exec("INSERT INTO locks (id, v) VALUES (1, 0), (2, 0)").Error)
	return db
}

// swallowDeadlock makes the transaction in ctx the victim of a deadlock with
// another transaction on db and returns the error it swallowed.
func swallowDeadlock(t *testing.T, ctx context.Context, db *gorm.DB) error {
	tx := uow.Tx(ctx)
	require.NoError(t, tx.Exec("UPDATE locks SET v = v + 1 WHERE id = 1").Error)
	other := db.Begin()
	defer other.Rollback()
	for i := range 50 { // heavier than the batch: InnoDB picks the batch as the victim
		require.NoError(t, other.Exec("INSERT INTO heavy (id) VALUES (?)", i).Error)
	}
	require.NoError(t, other.Exec("UPDATE locks SET v = v + 1 WHERE id = 2").Error)
	otherErr := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the batch waits first: PostgreSQL's detector aborts it
		otherErr <- other.Exec("UPDATE locks SET v = v + 1 WHERE id = 1").Error
	}()
	err := tx.Exec("UPDATE locks SET v = v + 1 WHERE id = 2").Error
	<-otherErr
	return err
}

// TestSwallowedDeadlockCollector: the same through a Collector (the
// machinery of bus.HandleBatch): each item in a Savepoint, the last one
// swallows a deadlock. On MariaDB its Savepoint fails to release, and the
// batch breaks: no Add returns nil for an item whose write was rolled back
// with the deadlock.
func TestSwallowedDeadlockCollector(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *gorm.DB{"postgres": testenv.Postgres, "mariadb": testenv.MySQL} {
		t.Run(name, func(t *testing.T) {
			db := deadlockTables(t, open)
			var swallowed error
			c, err := uow.NewCollector(uow.Config{DB: db, BatchSize: 3, BatchWait: time.Minute}, func(ctx context.Context, items []*uow.Collected) error {
				// the items in a fixed order: the one that deadlocks last
				byName := map[any]*uow.Collected{}
				for _, it := range items {
					byName[it.Item] = it
				}
				for _, name := range []string{"a", "b", "x"} {
					it := byName[name]
					it.Err = uow.Savepoint(ctx, func(ctx context.Context) error {
						if err := uow.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", name).Error; err != nil {
							return err
						}
						if name == "x" {
							swallowed = swallowDeadlock(t, ctx, db)
						}
						return nil
					})
				}
				return nil
			})
			require.NoError(t, err)
			errs := map[string]chan error{}
			for _, id := range []string{"a", "b", "x"} {
				ch := make(chan error, 1)
				errs[id] = ch
				go func() { ch <- c.Add(context.Background(), id) }()
			}
			acked := map[string]bool{}
			for id, ch := range errs {
				err := within(t, ch, 30*time.Second, "the batch did not end")
				t.Logf("%s: %v", id, err)
				acked[id] = err == nil
			}
			require.Error(t, swallowed, "no deadlock happened")
			t.Logf("swallowed: %v", swallowed)
			var ids []string
			require.NoError(t, db.Raw("SELECT id FROM effects ORDER BY id").Scan(&ids).Error)
			t.Logf("committed: %v", ids)
			for _, id := range []string{"a", "b"} {
				if acked[id] {
					require.Contains(t, ids, id, "%s was acked but its write did not commit (message loss)", id)
				}
			}
		})
	}
}

// TestCopiesInTwoBatchesDoNotDeadlock: batch A holds m1 and m2, batch B
// copies of m2 and m1 (the same IDs); each member claims its ID when its
// turn comes, as the inbox does. B's copies wait for A to end instead of
// claiming m2 before A does and then waiting for A's m1 while A waits for
// B's m2: a deadlock, and a retry for each member of the victim batch.
func TestCopiesInTwoBatchesDoNotDeadlock(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *gorm.DB{"postgres": testenv.Postgres, "mariadb": testenv.MySQL} {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			require.NoError(t, db.Exec("CREATE TABLE claims (id VARCHAR(20) PRIMARY KEY)").Error)
			claim := "INSERT INTO claims (id) VALUES (?) ON CONFLICT DO NOTHING"
			if name == "mariadb" {
				claim = "INSERT IGNORE INTO claims (id) VALUES (?)"
			}
			mw, err := uow.New(uow.Config{DB: db, BatchSize: 2, BatchWait: time.Minute})
			require.NoError(t, err)
			ran, held, release := make(chan string, 4), make(chan struct{}), make(chan struct{})
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				if msg.Metadata.Get("hold") != "" {
					close(held)
					<-release
				}
				err := uow.Tx(msg.Context()).Exec(claim, msg.UUID).Error
				ran <- msg.UUID
				return nil, err
			})
			errs := make(chan error, 4)
			start := func(id string, hold bool) {
				msg := message.NewMessage(id, nil)
				if hold {
					msg.Metadata.Set("hold", "yes")
				}
				go func() {
					_, err := h(msg)
					errs <- err
				}()
			}
			start("m1", false) // batch A
			<-ran
			start("m2", true) // batch A, full: it waits before it claims m2
			<-held
			start("m2", false) // batch B: without waiting for A, it would claim m2 now
			start("m1", false) // batch B: ... and then wait for A's m1
			select {
			case id := <-ran:
				t.Errorf("the copy of %s ran while batch A held it", id)
			case <-time.After(300 * time.Millisecond):
			}
			close(release)
			for range 4 {
				select {
				case err := <-errs:
					require.NoError(t, err, "a member failed: the batches deadlocked")
				case <-time.After(30 * time.Second):
					t.Fatal("the batches did not end")
				}
			}
			var n int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM claims").Scan(&n).Error)
			require.EqualValues(t, 2, n)
		})
	}
}

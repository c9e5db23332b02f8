package sql_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport"
	wsql "github.com/postroom/postroom/transport/sql"
	"github.com/postroom/postroom/transport/transporttest"
)

// features is what the transport promises, not what makes a test pass.
var features = tests.Features{
	// Each group reads a topic's table from its own offset; the group's
	// subscriptions take turns.
	ConsumerGroups: true,
	// At least once: the bus's handlers write in their own transaction,
	// not in the subscriber's, so a crash between the two redelivers.
	ExactlyOnceDelivery: false,
	// A table is read in offset order, one message at a time per group.
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	// The messages are rows: they outlive the process.
	Persistent: true,
	// Restarting the shared database would disturb every other test; the
	// bus's TestDatabaseRestartedMidRun restarts PostgreSQL on its own.
	RestartServiceCommand: nil,
	RequireSingleInstance: false,
	// A new subscriber of a group reads on from the group's offset, not
	// from the start. (A new group starts at a table's first row: a
	// handler added later gets the messages published before it, until
	// they are purged; docs/guarantees.md.)
	NewSubscriberReceivesOldMessages: false,
	ContextPreserved:                 false,
}

// databases gives each test (and its subtests' constructors) one database:
// a schema on PostgreSQL, a database on MariaDB.
var databases sync.Map // *testing.T -> *gorm.DB

func pubSubOn(open func(testing.TB) *gorm.DB) tests.ConsumerGroupPubSubConstructor {
	return func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		db, ok := databases.Load(t)
		if !ok {
			db, _ = databases.LoadOrStore(t, open(t))
			t.Cleanup(func() { databases.Delete(t) })
		}
		tr, err := wsql.New(wsql.Config{DB: db.(*gorm.DB), PollInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		sub, err := tr.Subscriber(group, 1)
		require.NoError(t, err)
		return tr.Publisher(), sub
	}
}

// TestPubSub runs Watermill's universal Pub/Sub tests against the
// transport as the bus uses it, on PostgreSQL and MariaDB.
func TestPubSub(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{{"postgres", testenv.Postgres}, {"mariadb", testenv.MySQL}} {
		t.Run(store.name, func(t *testing.T) {
			if store.name == "postgres" {
				watchLongTransactions(t)
			}
			group := pubSubOn(store.open)
			tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) { return group(t, "default") }, group)
		})
	}
}

// TestContract runs postroom's transport contract (transporttest) on
// PostgreSQL and MariaDB.
func TestContract(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{{"postgres", testenv.Postgres}, {"mariadb", testenv.MySQL}} {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			transporttest.Run(t, func(t *testing.T) transport.Transport {
				tr, err := wsql.New(wsql.Config{DB: store.open(t), PollInterval: 10 * time.Millisecond})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, tr.Close()) })
				return tr
			})
		})
	}
}

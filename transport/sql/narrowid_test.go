package sql_test

import (
	"context"
	"strings"
	"testing"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
	sqltransport "github.com/postroom/postroom/transport/sql"
)

// TestATopicTableFromBeforeIsWidenedByMigrate on MariaDB: a topic table
// that watermill-sql or an older postroom created keeps a 36-byte ID
// column, which refuses a longer ID (an outbox event's, an EDI control
// number): the publish says to run `postroom migrate`, and migrate widens
// the column. Without that, after an upgrade an outbox relay stops behind
// such a message, with the bare "Data too long for column 'uuid'".
func TestATopicTableFromBeforeIsWidenedByMigrate(t *testing.T) {
	db := testenv.MySQL(t)
	topic := testenv.Name("narrow_")
	qs, err := wmsql.DefaultMySQLSchema{}.SchemaInitializingQueries(wmsql.SchemaInitializingQueriesParams{Topic: topic})
	require.NoError(t, err)
	for _, q := range qs {
		require.NoError(t, db.Exec(q.Query).Error)
	}
	tr, err := sqltransport.New(sqltransport.Config{DB: db})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	long := message.NewMessage("edi-"+strings.Repeat("9", 40), []byte(`{}`))

	err = tr.Publisher().Publish(topic, long)
	require.ErrorContains(t, err, "Data too long for column 'uuid'")
	require.ErrorContains(t, err, "run `postroom migrate`, which widens it")

	_, err = store.Migrate(context.Background(), db, store.Tables{})
	require.NoError(t, err)
	require.NoError(t, tr.Publisher().Publish(topic, long))
	_, err = store.Migrate(context.Background(), db, store.Tables{})
	require.NoError(t, err, "a wide table is left as it is")
}

package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestRunRefusesAConnectionCountingFoundRows: a bus whose MySQL connection
// counts found rows (clientFoundRows=true, opened without store.Open)
// does not start: its inbox would handle every duplicate again.
func TestRunRefusesAConnectionCountingFoundRows(t *testing.T) {
	require.ErrorIs(t, runOnMySQLPool(t, "&clientFoundRows=true"), store.ErrFoundRows)
}

// TestRunRefusesAConnectionInAnotherTimeZone: a pool whose driver converts
// times to another zone (loc=…) would shift every time the bus writes to
// MySQL's DATETIME columns: young inbox keys purged, delayed messages
// delivered early. Run refuses it.
func TestRunRefusesAConnectionInAnotherTimeZone(t *testing.T) {
	require.ErrorIs(t, runOnMySQLPool(t, "&parseTime=true&loc=Europe%2FBerlin"), store.ErrTimeZone)
}

// runOnMySQLPool runs a bus with an inbox handler on a migrated MariaDB
// pool opened with gorm directly, its DSN ending in options, and returns
// what Run returned (within 20 s).
func runOnMySQLPool(t *testing.T, options string) error {
	t.Helper()
	db, err := gorm.Open(mysql.Open(testenv.MySQLDatabaseDSN(t)+options), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(db) })
	_, err = store.Migrate(context.Background(), db, store.Tables{})
	require.NoError(t, err)
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return b.Run(ctx)
}

package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

// TestFoundRowsAreRefused: a MySQL connection that counts found rows
// (clientFoundRows=true) makes the inbox see every duplicate as new (an
// INSERT … ON DUPLICATE KEY UPDATE of an existing key counts 1 row, not 0),
// so every redelivery would be handled again without a word. Open refuses
// such a DSN, and CheckFoundRows (which bus.Run calls) such a connection
// opened some other way.
func TestFoundRowsAreRefused(t *testing.T) {
	dsn := testenv.MySQLDatabaseDSN(t) + "&clientFoundRows=true"
	_, err := store.Open(dsn)
	require.ErrorIs(t, err, store.ErrFoundRows)

	ctx := context.Background()
	right := testenv.Migrated(t, testenv.MySQLDatabaseDSN(t), "MariaDB")
	require.NoError(t, store.CheckFoundRows(ctx, right))
	wrong, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(wrong) })
	require.NoError(t, store.CheckFoundRows(ctx, wrong), "nothing to check before the first migration")
	_, err = store.Migrate(ctx, wrong, store.Tables{})
	require.NoError(t, err)
	require.ErrorIs(t, store.CheckFoundRows(ctx, wrong), store.ErrFoundRows)
	require.NoError(t, store.CheckFoundRows(ctx, testenv.SQLite(t)), "only MySQL counts found rows")
}

// TestTimeZonesOtherThanUTCAreRefused: a MySQL connection whose driver
// converts times to another zone (loc=…) shifts every time postroom
// writes to its DATETIME columns by that zone's offset: young inbox keys
// are purged, delayed messages delivered early and a schedule's slot lost.
// Open refuses such a DSN, and CheckTimeZone (which bus.Run calls)
// such a connection opened some other way.
func TestTimeZonesOtherThanUTCAreRefused(t *testing.T) {
	base := testenv.MySQLDatabaseDSN(t)
	for _, loc := range []string{"Local", "Europe%2FBerlin"} {
		_, err := store.Open(base + "&loc=" + loc)
		require.ErrorIs(t, err, store.ErrTimeZone, loc)
	}
	right, err := store.Open(base + "&loc=UTC")
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(right) })
	ctx := context.Background()
	require.NoError(t, store.CheckTimeZone(ctx, right))
	for _, loc := range []string{"Europe%2FBerlin", "Europe%2FLondon"} { // London is UTC in winter only
		wrong, err := gorm.Open(mysql.Open(base+"&parseTime=true&loc="+loc), &gorm.Config{Logger: logger.Discard})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close(wrong) })
		require.ErrorIs(t, store.CheckTimeZone(ctx, wrong), store.ErrTimeZone, loc)
	}
	require.NoError(t, store.CheckTimeZone(ctx, testenv.SQLite(t)), "only MySQL's DATETIME keeps no zone")
}

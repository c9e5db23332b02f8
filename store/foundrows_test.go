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
// so every redelivery would be handled again without a word (found by a
// review). Open refuses such a DSN, and CheckFoundRows (which bus.Run
// calls) such a connection opened some other way.
func TestFoundRowsAreRefused(t *testing.T) {
	dsn := testenv.MySQLDatabaseDSN(t) + "&clientFoundRows=true"
	_, err := store.Open(dsn)
	require.ErrorIs(t, err, store.ErrFoundRows)

	ctx := context.Background()
	right := testenv.Migrated(t, testenv.MySQLDatabaseDSN(t), "MariaDB")
	require.NoError(t, store.CheckFoundRows(ctx, right, store.Tables{}))
	wrong, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close(wrong) })
	require.NoError(t, store.CheckFoundRows(ctx, wrong, store.Tables{}), "nothing to check before the first migration")
	_, err = store.Migrate(ctx, wrong, store.Tables{})
	require.NoError(t, err)
	require.ErrorIs(t, store.CheckFoundRows(ctx, wrong, store.Tables{}), store.ErrFoundRows)
	require.NoError(t, store.CheckFoundRows(ctx, testenv.SQLite(t), store.Tables{}), "only MySQL counts found rows")
}

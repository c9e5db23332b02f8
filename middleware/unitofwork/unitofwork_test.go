package unitofwork_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/unitofwork"
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
	_, err = unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		// Something else needs the pool while the handler calls out.
		var one int
		if err := db.WithContext(msg.Context()).Raw("SELECT 1").Scan(&one).Error; err != nil {
			return nil, err
		}
		return nil, unitofwork.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES ('m-1')").Error
	})
	require.NoError(t, err)

	// A rollback-only or failing unit that never wrote leaves nothing open.
	_, err = unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
		return nil, errors.New("failed before any write")
	})
	require.Error(t, err)
	var n int64
	require.NoError(t, db.WithContext(ctx).Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
	require.EqualValues(t, 1, n)
	require.False(t, unitofwork.Active(msg.Context()), "the message's context is given back")
}

package unitofwork_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// TestPublicAPI: what a plain Watermill router's user calls, on SQLite. The
// middleware commits what a handler writes through Tx, in one transaction
// or batched; RollbackOnly and an error roll it back; Run joins the unit
// already in the context; New refuses a Config without DB. The machinery
// itself is tested in internal/uow.
func TestPublicAPI(t *testing.T) {
	db := testenv.SQLite(t)
	require.NoError(t, db.Exec("CREATE TABLE effects (id VARCHAR(20) NOT NULL)").Error)
	count := func() int64 {
		var n int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects").Scan(&n).Error)
		return n
	}

	_, err := unitofwork.New(unitofwork.Config{})
	require.ErrorContains(t, err, "Config.DB is nil")

	for _, size := range []int{1, 2} {
		mw, err := unitofwork.New(unitofwork.Config{DB: db, BatchSize: size})
		require.NoError(t, err)
		before := count()
		handle := func(id string, rollbackOnly bool) {
			msg := message.NewMessage(id, nil)
			msg.SetContext(context.Background())
			_, err := mw(func(msg *message.Message) ([]*message.Message, error) {
				ctx := msg.Context()
				require.True(t, unitofwork.Active(ctx))
				if err := unitofwork.Tx(ctx).Exec("INSERT INTO effects (id) VALUES (?)", id).Error; err != nil {
					return nil, err
				}
				// Run inside the unit joins it: its write commits or rolls back with the message.
				_, err := unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
					return nil, unitofwork.Tx(msg.Context()).Exec("INSERT INTO effects (id) VALUES (?)", id+"-joined").Error
				})
				if err != nil {
					return nil, err
				}
				if rollbackOnly {
					unitofwork.RollbackOnly(ctx)
				}
				return nil, nil
			})(msg)
			require.NoError(t, err)
			require.False(t, unitofwork.Active(msg.Context()), "the message's context is given back")
		}
		handle("kept", false)
		require.Equal(t, before+2, count(), "batch size %d", size)
		handle("rolled-back", true)
		require.Equal(t, before+2, count(), "batch size %d", size)
	}
	require.Nil(t, unitofwork.Tx(context.Background()))
	require.False(t, unitofwork.Active(context.Background()))
}

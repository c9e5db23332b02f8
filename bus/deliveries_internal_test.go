package bus

import (
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metadata"
)

func TestUnsettledCountsNacksAndForgetsSettled(t *testing.T) {
	var u unsettled
	msg := message.NewMessage("m", nil)
	for n := range 3 {
		require.Equal(t, n, u.previous("g", msg))
		u.settle("g", "m", true, false)
	}
	require.Zero(t, u.previous("other-group", msg), "counted per group")
	msg.Metadata.Set(metadata.DeliveryCount, "7")
	require.Equal(t, 7, u.previous("g", msg), "the transport's count when greater")
	u.settle("g", "m", false, false)
	msg.Metadata.Set(metadata.DeliveryCount, "not a number")
	require.Zero(t, u.previous("g", msg), "settled: forgotten")
}

func TestUnsettledIsBounded(t *testing.T) {
	var u unsettled
	for i := range 3 * unsettledLimit {
		u.settle("g", strconv.Itoa(i), true, false)
		if i%2 == 0 {
			u.settle("g", strconv.Itoa(i), false, false)
		}
	}
	require.LessOrEqual(t, len(u.count), unsettledLimit)
	require.LessOrEqual(t, len(u.order), 2*unsettledLimit+64)
	require.Equal(t, 1, u.previous("g", message.NewMessage(strconv.Itoa(3*unsettledLimit-1), nil)), "the newest is kept")
}

func TestUnsettledKeepsACountWhoseOldSlotIsForgotten(t *testing.T) {
	var u unsettled
	u.settle("g", "a", true, false)
	u.settle("g", "a", false, false)
	u.settle("g", "a", true, false) // a new count of a, in a new slot
	for i := range unsettledLimit - 1 {
		u.settle("g", strconv.Itoa(i), true, false) // the first slot of a falls out
	}
	require.Equal(t, 1, u.previous("g", message.NewMessage("a", nil)))
}

// TestUnsettledSaysACountStoredInTheDatabase: a message one of whose
// nacked deliveries was counted in the database says so when it is
// settled, so that its row is deleted then, even by a delivery that was
// not counted there (on the SQL transport only a process's first read is).
func TestUnsettledSaysACountStoredInTheDatabase(t *testing.T) {
	var u unsettled
	u.settle("g", "m", true, true)
	u.settle("g", "m", true, false)
	require.True(t, u.settle("g", "m", false, false), "counted in the database by an earlier delivery")
	require.False(t, u.settle("g", "m", false, false), "forgotten once settled")
	u.settle("g", "n", true, false)
	require.False(t, u.settle("g", "n", false, false), "nacked, never counted in the database")
}

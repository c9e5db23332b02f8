package bus

import (
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func nacksOf(c *nackCount, group, id string) int {
	n, _, _, _ := c.previous(message.NewMessage(id, nil), group, "")
	return n
}

func endedWith(c *nackCount, group, id string, nacked bool) {
	_ = c.ended(message.NewMessage(id, nil), group, "", false, nacked, false)
}

func TestNackCountCountsNacksAndForgetsSettled(t *testing.T) {
	var c nackCount
	for n := range 3 {
		require.Equal(t, n, nacksOf(&c, "g", "m"))
		endedWith(&c, "g", "m", true)
	}
	require.Zero(t, nacksOf(&c, "other-group", "m"), "counted per group")
	require.True(t, c.seen("g", "m"))
	endedWith(&c, "g", "m", false)
	require.Zero(t, nacksOf(&c, "g", "m"), "settled: forgotten")
	require.False(t, c.seen("g", "m"))
}

func TestNackCountIsBounded(t *testing.T) {
	var c nackCount
	for i := range 3 * nackCountLimit {
		endedWith(&c, "g", strconv.Itoa(i), true)
		if i%2 == 0 {
			endedWith(&c, "g", strconv.Itoa(i), false)
		}
	}
	require.LessOrEqual(t, len(c.count), nackCountLimit)
	require.LessOrEqual(t, len(c.order), 2*nackCountLimit+64)
	require.Equal(t, 1, nacksOf(&c, "g", strconv.Itoa(3*nackCountLimit-1)), "the newest is kept")
}

func TestNackCountKeepsACountWhoseOldSlotIsForgotten(t *testing.T) {
	var c nackCount
	endedWith(&c, "g", "a", true)
	endedWith(&c, "g", "a", false)
	endedWith(&c, "g", "a", true) // a new count of a, in a new slot
	for i := range nackCountLimit - 1 {
		endedWith(&c, "g", strconv.Itoa(i), true) // the first slot of a falls out
	}
	require.Equal(t, 1, nacksOf(&c, "g", "a"))
}

package idempotency

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckRetention(t *testing.T) {
	require.NoError(t, CheckRetention(240*60*60*1e9, 60*1e9))
	err := CheckRetention(60*1e9, 3*60*60*1e9)
	require.ErrorIs(t, err, ErrRetentionTooShort)
	require.ErrorContains(t, err, "raise the retention")
}

package bus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
)

// TestALimiterCountsOnlySuccessesBegunSince: a success of an attempt begun
// before a run of transient failures neither ends the run (the limiting
// starts at Threshold failures all the same) nor, once the limiting has
// started, ends it; a success of an attempt begun after does both.
func TestALimiterCountsOnlySuccessesBegunSince(t *testing.T) {
	l := newLimiter("h", RateLimit{Threshold: 3, Wait: time.Millisecond}, testenv.Logger(t), metrics.Discard{})
	early := l.begin() // its COMMIT on its way when the database goes
	l.record(l.begin(), false, true)
	l.record(early, true, false)
	l.record(l.begin(), false, true)
	late := l.begin() // begun before the limiting, after the run began
	l.record(l.begin(), false, true)
	require.True(t, l.open.Load(), "three failures in a row, the early success aside")

	l.record(late, true, false)
	require.True(t, l.open.Load(), "a success begun before the limiting does not end it")
	l.record(l.begin(), true, false)
	require.False(t, l.open.Load(), "a success begun since ends it")
	require.Zero(t, l.failures.Load())

	l.record(l.begin(), false, true)
	l.record(l.begin(), true, false)
	require.Zero(t, l.failures.Load(), "a success begun after the failure ends the run")
}

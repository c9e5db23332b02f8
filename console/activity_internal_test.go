package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/metrics"
)

// TestSamplerCountsAResetAndForgetsTheOldest: a counter that went down
// belongs to a bus that restarted, and grew by its value; what is older
// than the window is dropped.
func TestSamplerCountsAResetAndForgetsTheOldest(t *testing.T) {
	s := newSampler([]string{"u"}, time.Hour)
	k := seriesKey{"h", metrics.Handled}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.record("u", map[seriesKey]float64{k: 50}, at)                   // baseline
	s.record("u", map[seriesKey]float64{k: 57}, at.Add(time.Minute))  // +7
	s.record("u", map[seriesKey]float64{k: 4}, at.Add(2*time.Minute)) // restarted: +4
	s.record("u", map[seriesKey]float64{k: 4}, at.Add(3*time.Minute)) // nothing
	require.Equal(t, []point{{at.Add(time.Minute), 7}, {at.Add(2 * time.Minute), 4}}, s.points[k])

	s.urls = nil // sample only prunes
	s.sample(t.Context(), at.Add(time.Hour+time.Minute))
	require.Equal(t, []point{{at.Add(2 * time.Minute), 4}}, s.points[k], "an hour later, the first is out of the window")

	a := newActivity(at.Add(time.Hour+time.Minute), time.Hour)
	_, err := s.fill(a)
	require.NoError(t, err)
	require.EqualValues(t, 4, a.rows["h"][metrics.Handled][0], "the first bar")
}

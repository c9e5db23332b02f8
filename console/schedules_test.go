package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/testenv"
)

// TestAPausedScheduleHasNoTrigger: a paused schedule does not fire, so its
// row offers Resume and no Trigger, and a trigger posted anyway is refused
// with the reason instead of a banner saying it will fire.
func TestAPausedScheduleHasNoTrigger(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	ctl, err := schedcontrol.New(f.db, "")
	require.NoError(t, err)
	require.NoError(t, ctl.Pause(context.Background(), "nightly"))
	before := nextRun(t, f.db)

	status, body, _ := f.do(t, "GET", "/schedules", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `value="resume"`)
	require.NotContains(t, body, `value="trigger"`, "no Trigger on a paused row")

	form := url.Values{"csrf": {f.csrf(t, nil)}, "name": {"nightly"}, "action": {"trigger"}}
	status, body, _ = f.do(t, "POST", "/schedules/action", form, f.origin())
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, body, `schedule "nightly" is paused: resume it first`)
	require.Equal(t, before, nextRun(t, f.db), "not triggered")
}

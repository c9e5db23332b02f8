package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metadata"
)

var (
	failedRowFull = regexp.MustCompile(`(?s)<tr data-id="([^"]*)" data-group="([^"]*)">(.*?)</tr>`)
	failedGroup   = regexp.MustCompile(`(?s)<section class="group">(.*?)</section>`)
	messageCard   = regexp.MustCompile(`<section class="card" data-group="([^"]*)">`)
)

// failedRows returns the rows the failed messages page lists: each
// copy's ID and endpoint group.
func (f *fixture) failedRows(t *testing.T) [][2]string {
	t.Helper()
	_, body, _ := f.do(t, "GET", "/failed", nil, nil)
	var rows [][2]string
	for _, m := range failedRowFull.FindAllStringSubmatch(body, -1) {
		rows = append(rows, [2]string{m[1], html.UnescapeString(m[2])})
	}
	return rows
}

// link returns the href of the link labelled label in the HTML in.
func link(t *testing.T, in, label string) string {
	t.Helper()
	m := regexp.MustCompile(`href="([^"]+)">` + regexp.QuoteMeta(label) + `</a>`).FindStringSubmatch(in)
	require.NotNil(t, m, "a link %q in %s", label, in)
	return html.UnescapeString(m[1])
}

// TestCopiesOfTwoEndpointsAreToldApart: two endpoints (trialu_a,
// trialu_b) both handle one event, so their handlers have one name; when
// both fail a message, the error topic holds two copies alike in ID,
// handler, reason, attempts and time, and unlike only in the endpoint
// group of the handler that failed (postroom-error-group). They are two
// failure groups, each heading and row names its group, a row's Retry and
// Delete and a group's Delete take that group's copy alone and leave the
// other's, and a message's page says whose copy is whose. A request that
// names no group (an older link, or a script) takes every copy of the ID.
// Grouped without the endpoint group, the copies are one failure group of
// two rows that look alike, and a row's Retry or Delete takes both.
func TestCopiesOfTwoEndpointsAreToldApart(t *testing.T) {
	for _, tc := range errorTopics {
		if tc.unsupported != "" {
			continue // TestFailedActionsTakeOnlyWhatWasConfirmed checks the page says so
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.open(t)
			a, b := bus.GroupOf("trialu_a", "trialu.Evt"), bus.GroupOf("trialu_b", "trialu.Evt")
			e.subscribe(t, a)
			e.subscribe(t, b)
			at := failedNow()
			fail := func(group string) {
				msg := message.NewMessage("evt-1", []byte(`{"N":1}`))
				msg.Metadata = message.Metadata{metadata.ErrorHandler: "trialu.Evt", metadata.ErrorReason: "boom",
					metadata.ErrorAttempts: "3", metadata.ErrorTopic: e.retryTopic, metadata.ErrorGroup: group, metadata.ErrorAt: at}
				e.publish(t, msg)
			}
			fail(a)
			fail(b)
			e.settle(t, 2)

			// The list: a failure group per endpoint, each row named.
			_, body, _ := e.f.do(t, "GET", "/failed", nil, nil)
			groups := failedGroup.FindAllStringSubmatch(body, -1)
			require.Equal(t, 2, len(groups), "a failure group per endpoint")
			section := map[string]string{}
			for i, g := range []string{a, b} {
				require.Contains(t, groups[i][1], `<span class="endpoint-group">of `+g+`</span>: <span class="reason">boom</span> <span class="count">(1)</span>`)
				section[g] = groups[i][1]
			}
			e.settle(t, 2)
			require.Equal(t, [][2]string{{"evt-1", a}, {"evt-1", b}}, e.f.failedRows(t))

			// The message page: both copies, each named; or the one asked for.
			e.settle(t, 2)
			_, body, _ = e.f.do(t, "GET", "/failed/message?id=evt-1", nil, nil)
			require.Equal(t, [][]string{{`<section class="card" data-group="` + a + `">`, a}, {`<section class="card" data-group="` + b + `">`, b}},
				messageCard.FindAllStringSubmatch(body, -1))
			require.Contains(t, body, "2 copies have this ID, of 2 endpoint groups: the actions of a group take its copies only.")
			for _, g := range []string{a, b} {
				require.Contains(t, body, `href="/failed/confirm?action=delete&amp;id=evt-1&amp;group=`+g+`">Delete</a>`, "an action per group")
			}
			e.settle(t, 2)
			_, body, _ = e.f.do(t, "GET", link(t, section[a], "evt-1"), nil, nil) // the row's link
			require.Equal(t, [][]string{{`<section class="card" data-group="` + a + `">`, a}}, messageCard.FindAllStringSubmatch(body, -1))
			require.Contains(t, body, `1 other copies of this ID are of other endpoint groups`)

			// Retry a's copy from its row: b's stays.
			e.settle(t, 2)
			path := link(t, section[a], "Retry")
			require.Contains(t, path, "group="+a)
			form := e.f.confirm(t, path, "Retry 1")
			_, page, _ := e.f.do(t, "GET", path, nil, nil)
			require.Contains(t, page, "Retry message evt-1 of endpoint group "+a+": 1 message(s)")
			e.settle(t, 2)
			status, body, res := e.f.do(t, "POST", "/failed/retry", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			require.Equal(t, "/failed?"+url.Values{"done": {"retried"}, "subject": {"message evt-1 of endpoint group " + a + " (1)"}}.Encode(),
				res.Header.Get("Location"), "the other endpoint's copy was not in the selection")
			e.settle(t, 1)
			require.Equal(t, [][2]string{{"evt-1", b}}, e.f.failedRows(t), "the other endpoint's copy stays")
			require.Eventually(t, func() bool { return e.retried(t, a) == 1 }, 5*time.Second, 20*time.Millisecond, "a's copy went back to a")
			require.Zero(t, e.retried(t, b), "nothing went back to b")

			// a's handler fails it again; delete b's copy from its row: a's stays.
			fail(a)
			e.settle(t, 2)
			_, body, _ = e.f.do(t, "GET", "/failed", nil, nil)
			var row string
			for _, m := range failedRowFull.FindAllStringSubmatch(body, -1) {
				if m[2] == b {
					row = m[3]
				}
			}
			require.NotEmpty(t, row, "b's row")
			e.settle(t, 2)
			form = e.f.confirm(t, link(t, row, "Delete"), "Delete 1")
			e.settle(t, 2)
			status, body, _ = e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			e.settle(t, 1)
			require.Equal(t, [][2]string{{"evt-1", a}}, e.f.failedRows(t), "the other endpoint's copy stays")

			// b's fails again; delete a's failure group: b's stays.
			fail(b)
			e.settle(t, 2)
			_, body, _ = e.f.do(t, "GET", "/failed", nil, nil)
			var groupA string
			for _, g := range failedGroup.FindAllStringSubmatch(body, -1) {
				if strings.Contains(g[1], "of "+a+"</span>") {
					groupA = g[1]
				}
			}
			require.NotEmpty(t, groupA, "a's failure group")
			e.settle(t, 2)
			path = link(t, groupA, "Delete group")
			form = e.f.confirm(t, path, "Delete 1")
			_, page, _ = e.f.do(t, "GET", path, nil, nil)
			require.Contains(t, page, `Delete the messages of trialu.Evt of endpoint group `+a+` that failed like &#34;boom&#34;: 1 message(s)`)
			e.settle(t, 2)
			status, body, _ = e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			e.settle(t, 1)
			require.Equal(t, [][2]string{{"evt-1", b}}, e.f.failedRows(t), "the other endpoint's failure group stays")

			// A request that names no group takes every copy of the ID.
			fail(a)
			e.settle(t, 2)
			form = e.f.confirm(t, "/failed/confirm?action=delete&id=evt-1", "Delete 2")
			e.settle(t, 2)
			status, body, _ = e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			e.settle(t, 0)
			require.Empty(t, e.f.failedRows(t))
		})
	}
}

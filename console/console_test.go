package console_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/scheduler"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is a console over a database with one schedule ("nightly") and
// one unresolved claim (billing/Charge, message "m-1"), served by an
// httptest server whose URL is also the Origin of its own pages.
type fixture struct {
	db  *gorm.DB
	srv *httptest.Server
	log *strings.Builder
}

func newFixture(t *testing.T, db *gorm.DB, cfg console.Config) *fixture {
	t.Helper()
	d, err := dialects.Of(db)
	require.NoError(t, err)
	st, err := d.Schedules(scheduler.TableDefault)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, db.Exec(st.Insert, "nightly", "@daily", d.Time(now.Add(time.Hour)), d.Time(now)).Error)
	dl, err := d.Delayed(dialect.DelayedTableDefault)
	require.NoError(t, err)
	require.NoError(t, db.Exec(dl.Insert, d.Time(now.Add(time.Hour)), "reminders", "", "r-1", []byte("{}"), "{}", d.Time(now)).Error)
	require.NoError(t, db.Exec(d.ClaimInsert(inbox.TableDefault), "billing/Charge", "", "m-1", "test.Charge",
		d.Time(now.Add(-time.Hour)), d.Time(now.Add(-30*time.Minute)), "sum", []byte("{}")).Error)
	f := &fixture{db: db, log: &strings.Builder{}}
	cfg.DB = db
	cfg.Logger = slog.New(slog.NewTextHandler(f.log, nil))
	c, err := console.New(cfg)
	require.NoError(t, err)
	f.srv = httptest.NewServer(c)
	t.Cleanup(f.srv.Close)
	return f
}

// client follows no redirect, so a test sees each answer.
func (f *fixture) client() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) do(t *testing.T, method, path string, form url.Values, header map[string]string) (int, string, *http.Response) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		}
		req.Header.Set(k, v)
	}
	res, err := f.client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b), res
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the CSRF token from the schedules page, as a browser has it.
func (f *fixture) csrf(t *testing.T, header map[string]string) string {
	t.Helper()
	status, body, _ := f.do(t, "GET", "/schedules", nil, header)
	require.Equal(t, http.StatusOK, status)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(t, m, "the schedules page has a form with the CSRF token")
	return m[1]
}

func (f *fixture) origin() map[string]string { return map[string]string{"Origin": f.srv.URL} }

func nextRun(t *testing.T, db *gorm.DB) time.Time {
	t.Helper()
	c, err := schedcontrol.New(db, "")
	require.NoError(t, err)
	list, err := c.List(context.Background())
	require.NoError(t, err)
	require.Len(t, list, 1)
	return list[0].NextRunAt
}

// TestActionsNeedCSRFAndOrigin: a POST without the CSRF token, with a wrong
// one, or from another origin changes nothing; the console's own form does.
func TestActionsNeedCSRFAndOrigin(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	token := f.csrf(t, nil)
	before := nextRun(t, f.db)
	trigger := func(csrf string) url.Values {
		v := url.Values{"name": {"nightly"}, "action": {"trigger"}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	for name, tc := range map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"no CSRF token":      {trigger(""), f.origin()},
		"wrong CSRF token":   {trigger(strings.Repeat("0", len(token))), f.origin()},
		"another origin":     {trigger(token), map[string]string{"Origin": "http://evil.example"}},
		"another referer":    {trigger(token), map[string]string{"Referer": "http://evil.example/page"}},
		"no origin, referer": {trigger(token), nil},
	} {
		status, body, _ := f.do(t, "POST", "/schedules/action", tc.form, tc.header)
		require.Equal(t, http.StatusForbidden, status, name)
		require.NotEmpty(t, body, name)
		require.Equal(t, before, nextRun(t, f.db), "%s: the schedule was not triggered", name)
	}

	status, _, res := f.do(t, "POST", "/schedules/action", trigger(token), map[string]string{"Referer": f.srv.URL + "/schedules"})
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, res.Header.Get("Location"), "/schedules?done=trigger")
	require.True(t, nextRun(t, f.db).Before(before), "triggered: due now")
}

// TestReadOnly: no page of a read-only console has an action, and every
// POST is refused, with the right CSRF token too.
func TestReadOnly(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{ReadOnly: true})
	for _, path := range []string{"/", "/schedules", "/unresolved", "/inbox?id=m-1",
		"/unresolved/confirm?resolution=done&consumer=billing/Charge&id=m-1", "/failed/confirm?action=retry&id=x"} {
		status, body, _ := f.do(t, "GET", path, nil, nil)
		require.Equal(t, http.StatusOK, status, path)
		require.NotContains(t, body, `method="post"`, path)
		for _, action := range []string{"Retry", "Delete", "Trigger", "Pause", "Resume", "Release"} {
			require.NotContains(t, body, ">"+action, path)
		}
		require.NotContains(t, body, `class="button`, path)
		require.NotContains(t, body, `name="csrf"`, path)
	}
	_, body, _ := f.do(t, "GET", "/unresolved", nil, nil)
	require.Contains(t, body, "m-1", "read-only still shows")

	for _, path := range []string{"/schedules/action", "/unresolved/resolve", "/failed/retry", "/failed/delete"} {
		status, body, _ := f.do(t, "POST", path, url.Values{"name": {"nightly"}, "action": {"pause"}, "consumer": {"billing/Charge"},
			"id": {"m-1"}, "resolution": {"done"}, "all": {"1"}}, f.origin())
		require.Equal(t, http.StatusForbidden, status, path)
		require.Contains(t, body, "read-only", "refused for being read-only, before the CSRF token is looked at")
	}
	c, err := schedcontrol.New(f.db, "")
	require.NoError(t, err)
	list, err := c.List(context.Background())
	require.NoError(t, err)
	require.False(t, list[0].Paused)
	unresolved, err := claims.ListUnresolved(context.Background(), f.db, "", time.Now(), 10)
	require.NoError(t, err)
	require.Len(t, unresolved, 1)
}

// TestTokenRequired: with a token, a request without it is sent to the
// login form (GET) or refused (POST); the header or a login lets it in.
func TestTokenRequired(t *testing.T) {
	const token = "t0ken-for-the-test"
	f := newFixture(t, testenv.SQLite(t), console.Config{Token: token})

	status, _, res := f.do(t, "GET", "/schedules", nil, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/login?next=%2Fschedules", res.Header.Get("Location"))
	status, body, _ := f.do(t, "GET", "/login", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `name="token"`)
	require.NotContains(t, body, `name="csrf"`, "the login page gives no CSRF token away")
	status, _, _ = f.do(t, "POST", "/schedules/action", url.Values{"name": {"nightly"}, "action": {"pause"}}, f.origin())
	require.Equal(t, http.StatusUnauthorized, status)
	for _, method := range []string{"GET", "POST"} {
		status, _, res = f.do(t, method, "/schedules/action", url.Values{"name": {"nightly"}, "action": {"pause"}},
			map[string]string{"Authorization": "Bearer wrong", "Origin": f.srv.URL})
		require.Equal(t, http.StatusUnauthorized, status, "%s with a wrong bearer token: a status, not the login page", method)
		require.Contains(t, res.Header.Get("WWW-Authenticate"), "Bearer")
	}
	status, _, res = f.do(t, "GET", "/static/console.css", nil, nil)
	require.Equal(t, http.StatusOK, status, "the style sheet needs no token")
	require.Contains(t, res.Header.Get("Content-Type"), "text/css")

	bearer := map[string]string{"Authorization": "Bearer " + token}
	status, _, _ = f.do(t, "GET", "/schedules", nil, bearer)
	require.Equal(t, http.StatusOK, status)

	status, body, _ = f.do(t, "POST", "/login", url.Values{"token": {"nope"}, "next": {"/schedules"}}, f.origin())
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, "not the console's access token")
	status, _, _ = f.do(t, "POST", "/login", url.Values{"token": {token}}, map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, status, "a login from another origin")
	status, _, res = f.do(t, "POST", "/login", url.Values{"token": {token}, "next": {"//evil.example/"}}, f.origin())
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/", res.Header.Get("Location"), "next stays on the console")
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "postroom_console" {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.NotContains(t, cookie.Value, token, "the cookie is not the token")
	session := map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}
	status, body, _ = f.do(t, "GET", "/unresolved", nil, session)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "m-1")
}

// TestLoopbackHostOnlyWithoutToken: without a token, a request whose Host
// is not loopback (DNS rebinding) is refused; with one, the token decides.
func TestLoopbackHostOnlyWithoutToken(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	status, _, _ := f.do(t, "GET", "/", nil, map[string]string{"Host": "evil.example"})
	require.Equal(t, http.StatusForbidden, status)
	for _, host := range []string{"localhost:8080", "127.0.0.1", "[::1]:80"} {
		status, _, _ := f.do(t, "GET", "/", nil, map[string]string{"Host": host})
		require.Equal(t, http.StatusOK, status, host)
	}
}

// TestOtherSitesAreRefused: a page of another site, or of another port of
// the same host (same-site), cannot make the console read anything (on
// RabbitMQ every read of the error queue returns its messages, counted on
// a quorum queue): <img src="http://127.0.0.1:8080/failed"> gets a 403.
// The console's own pages, an address typed in (none) and clients that
// send no Sec-Fetch-Site are served.
func TestOtherSitesAreRefused(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	for _, path := range []string{"/", "/failed", "/failed/message?id=x", "/failed/confirm?action=retry&all=1", "/unresolved", "/schedules"} {
		for _, site := range []string{"cross-site", "same-site"} {
			status, body, _ := f.do(t, "GET", path, nil, map[string]string{"Sec-Fetch-Site": site})
			require.Equal(t, http.StatusForbidden, status, "%s from %s", path, site)
			require.Contains(t, body, "Sec-Fetch-Site: "+site)
		}
	}
	for _, site := range []string{"", "none", "same-origin"} {
		h := map[string]string{}
		if site != "" {
			h["Sec-Fetch-Site"] = site
		}
		status, _, _ := f.do(t, "GET", "/", nil, h)
		require.Equal(t, http.StatusOK, status, "Sec-Fetch-Site %q", site)
	}
	token := f.csrf(t, map[string]string{"Sec-Fetch-Site": "same-origin"})
	status, _, _ := f.do(t, "POST", "/schedules/action", url.Values{"csrf": {token}, "name": {"nightly"}, "action": {"pause"}},
		map[string]string{"Origin": f.srv.URL, "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, status)
}

func TestCheckListen(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "localhost:80": true, "[::1]:8080": true, "127.0.0.2:1": true,
		"0.0.0.0:8080": false, ":8080": false, "10.1.2.3:8080": false, "example.com:80": false} {
		err := console.CheckListen(addr, "")
		if ok {
			require.NoError(t, err, addr)
		} else {
			require.ErrorContains(t, err, "--token", addr)
			require.NoError(t, console.CheckListen(addr, "a token"), addr)
		}
	}
	require.ErrorContains(t, console.CheckListen("127.0.0.1", ""), "host:port")
}

// TestNoSecretOnAnyPage: the DSN's password, the broker URL's and the
// token appear on no page and in no log line, also when the broker cannot
// be reached and its error is shown.
func TestNoSecretOnAnyPage(t *testing.T) {
	const (
		dbPassword   = "db-pa55word"
		amqpPassword = "amqp-pa55word"
		token        = "the-t0ken"
	)
	dsn := "postgres://postroom:" + dbPassword + "@127.0.0.1:5432/postroom_test"
	amqpURL := "amqp://guest:" + amqpPassword + "@127.0.0.1:1/"
	f := newFixture(t, testenv.SQLite(t), console.Config{Token: token, AMQPURL: amqpURL, Secrets: []string{dsn}})
	auth := map[string]string{"Authorization": "Bearer " + token}
	csrf := f.csrf(t, auth)
	var seen strings.Builder
	for _, path := range []string{"/", "/failed", "/failed/message?id=x", "/failed/confirm?action=retry&all=1", "/unresolved",
		"/unresolved/confirm?resolution=release&consumer=billing/Charge&id=m-1", "/schedules", "/inbox?id=m-1", "/login", "/nope"} {
		_, body, _ := f.do(t, "GET", path, nil, auth)
		seen.WriteString(body)
	}
	for _, path := range []string{"/failed/retry", "/failed/delete", "/schedules/action", "/unresolved/resolve"} {
		h := map[string]string{"Authorization": "Bearer " + token, "Origin": f.srv.URL}
		_, body, _ := f.do(t, "POST", path, url.Values{"csrf": {csrf}, "all": {"1"}, "copies": {"z"}, "name": {"none"}, "action": {"trigger"},
			"resolution": {"done"}, "consumer": {"x"}, "id": {"y"}}, h)
		seen.WriteString(body)
	}
	_, body, _ := f.do(t, "GET", "/failed", nil, auth)
	require.Contains(t, body, `class="error"`, "the broker's error is shown")
	for _, secret := range []string{dbPassword, amqpPassword, token, dsn, amqpURL} {
		require.NotContains(t, seen.String(), secret)
		require.NotContains(t, f.log.String(), secret)
	}
	require.Contains(t, f.log.String(), "console: request", "the log is written")
}

// TestUnresolvedResolve: the confirmation page shows the idempotency key
// and the attempt; its form releases the claim.
func TestUnresolvedResolve(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	_, body, _ := f.do(t, "GET", "/unresolved/confirm?resolution=release&consumer=billing/Charge&id=m-1&attempts=1", nil, nil)
	require.Contains(t, body, idempotency.Key("billing/Charge", "", "m-1"))
	require.Contains(t, body, "attempt 1,")
	csrf := csrfField.FindStringSubmatch(body)[1]
	status, _, res := f.do(t, "POST", "/unresolved/resolve", url.Values{"csrf": {csrf}, "consumer": {"billing/Charge"}, "source": {""},
		"id": {"m-1"}, "resolution": {"release"}, "attempts": {"1"}}, f.origin())
	require.Equal(t, http.StatusSeeOther, status)
	_, body, _ = f.do(t, "GET", res.Header.Get("Location"), nil, nil)
	require.Contains(t, body, "Released message m-1 of billing/Charge")
	require.Contains(t, body, "No unresolved external effects")

	status, body, _ = f.do(t, "POST", "/unresolved/resolve", url.Values{"csrf": {csrf}, "consumer": {"billing/Charge"}, "source": {""},
		"id": {"m-1"}, "resolution": {"release"}}, f.origin())
	require.Equal(t, http.StatusBadRequest, status, "a form without the attempt")
	require.Contains(t, body, "names no attempt")
}

var resolveLink = regexp.MustCompile(`<a class="button resolve-done" href="([^"]+)">`)

// TestAStaleConfirmationResolvesNothing: a confirmation page resolves the
// attempt it showed, no other. Opened on attempt 1, submitted after
// another operator released that attempt and the next copy ran the
// handler and died again (attempt 2, unresolved), it changes nothing and
// says the claim changed: it must not resolve attempt 2, which nobody has
// looked at.
func TestAStaleConfirmationResolvesNothing(t *testing.T) {
	f := newFixture(t, testenv.SQLite(t), console.Config{})
	_, body, _ := f.do(t, "GET", "/unresolved", nil, nil)
	m := resolveLink.FindStringSubmatch(body)
	require.NotNil(t, m, "the unresolved page links to the confirmation")
	form := f.confirm(t, html.UnescapeString(m[1]), "Resolve as done")

	key := inbox.Key{MessageID: "m-1"}
	now := time.Now()
	require.NoError(t, claims.ResolveAttempt(context.Background(), f.db, "", "billing/Charge", key, 1, claims.DidNotHappen, now))
	d, err := dialects.Of(f.db)
	require.NoError(t, err)
	res := f.db.Exec(d.ClaimTakeover(inbox.TableDefault), d.Time(now.Add(-time.Minute)), d.Time(now), "billing/Charge", "", "m-1",
		dialect.StatusReleased, 1) // the next copy, whose process died too: attempt 2, its lease run out
	require.NoError(t, res.Error)
	require.EqualValues(t, 1, res.RowsAffected)

	status, body, _ := f.do(t, "POST", "/unresolved/resolve", form, f.origin())
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, "the claim changed since it was shown")
	require.Contains(t, body, "attempt 1 was shown, the claim is at attempt 2")
	list, err := claims.ListUnresolved(context.Background(), f.db, "", now, 10)
	require.NoError(t, err)
	require.Len(t, list, 1, "attempt 2 is still unresolved")
	require.Equal(t, 2, list[0].Attempts)
}

// TestUnresolvedCountAtTheLimit: the overview reads at most Limit claims,
// so a count equal to it says "at least", not "1 unresolved" of a
// database that may hold many more.
func TestUnresolvedCountAtTheLimit(t *testing.T) {
	for limit, want := range map[int]string{1: "at least 1 unresolved external effect", 2: "1 unresolved external effect"} {
		f := newFixture(t, testenv.SQLite(t), console.Config{Limit: limit})
		status, body, _ := f.do(t, "GET", "/", nil, nil)
		require.Equal(t, http.StatusOK, status)
		attention := body[strings.Index(body, `id="attention"`):]
		require.Contains(t, attention[:strings.Index(attention, "</ul>")], want+": find out", "limit %d", limit)
		require.Contains(t, body, `<p class="hint">1 schedule, `+want+",", "limit %d", limit)
		if limit == 2 {
			require.NotContains(t, body, "at least")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	_, err := console.New(console.Config{Limit: -1})
	require.ErrorContains(t, err, "Config.DB is required")
	require.ErrorContains(t, err, "Limit -1 is negative")
	_, err = console.New(console.Config{DB: testenv.SQLite(t)})
	require.NoError(t, err)
}

// TestPagesOnEveryStore: every page reads each store without an error.
func TestPagesOnEveryStore(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			f := newFixture(t, store.Open(t), console.Config{})
			for path, want := range map[string]string{
				"/":                                     "1 unresolved external effect, <span id=\"delayed\">1 delayed message<",
				"/unresolved":                           "test.Charge",
				"/schedules":                            "@daily",
				"/inbox?id=m-1&consumer=billing/Charge": "processing",
			} {
				status, body, _ := f.do(t, "GET", path, nil, nil)
				require.Equal(t, http.StatusOK, status, path)
				require.NotContains(t, body, `class="error"`, path)
				require.Contains(t, body, want, path)
			}
		})
	}
}

// TestLoginRateLimit: five wrong tokens from one address within a minute
// (login form or bearer header, counted together) and its next attempt
// gets 429 with Retry-After, the right token too; other addresses are not
// held up, and a minute after its oldest failure the address may try again.
func TestLoginRateLimit(t *testing.T) {
	const token = "t0ken-for-the-test"
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	c, err := console.New(console.Config{DB: testenv.SQLite(t), Token: token, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	const origin = "http://127.0.0.1:8080"
	login := func(from, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", origin+"/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		req.RemoteAddr = from + ":40000"
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec
	}
	bearer := func(from, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", origin+"/static/console.css", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.RemoteAddr = from + ":40000"
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec
	}

	for range 3 {
		require.Equal(t, http.StatusUnauthorized, login("10.0.0.1", "guess").Code)
		advance(time.Second)
	}
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, bearer("10.0.0.1", "guess").Code)
		advance(time.Second)
	}
	for _, rec := range []*httptest.ResponseRecorder{login("10.0.0.1", token), bearer("10.0.0.1", token), login("10.0.0.1", "guess")} {
		require.Equal(t, http.StatusTooManyRequests, rec.Code, "the sixth attempt within a minute, even with the right token")
		require.Equal(t, "55", rec.Header().Get("Retry-After"), "the oldest failure is 5 s old: 55 s to wait")
	}
	require.Equal(t, http.StatusSeeOther, login("10.0.0.2", token).Code, "another address logs in")
	require.Equal(t, http.StatusOK, bearer("10.0.0.2", token).Code)

	advance(55 * time.Second)
	require.Equal(t, http.StatusUnauthorized, login("10.0.0.1", "guess").Code, "a minute after the first failure: one more try")
	require.Equal(t, http.StatusTooManyRequests, login("10.0.0.1", token).Code, "and five failures in the minute again")
	advance(time.Minute)
	require.Equal(t, http.StatusSeeOther, login("10.0.0.1", token).Code, "a minute later the right token logs in")
}

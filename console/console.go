package console

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/store"
)

// ListenDefault is the address the console listens on by default: loopback.
const ListenDefault = "127.0.0.1:8080"

// LimitDefault is how many failed messages or unresolved claims a page reads.
const LimitDefault = 1000

// TokenEnv is where `postroom console` reads the token without --token.
const TokenEnv = "POSTROOM_CONSOLE_TOKEN"

// Config configures a [Console].
type Config struct {
	// DB is postroom's database. Required.
	DB *gorm.DB
	// Tables names postroom's tables. Defaults to store.Tables{}.WithDefaults().
	// Delayed must be the default: it is the only one a bus polls.
	Tables store.Tables
	// AMQPURL is RabbitMQ's URL, for the failed messages; without it they
	// are the SQL transport's, if DB has the error topic's table. It is
	// never shown. Defaults to none.
	AMQPURL string
	// ErrorTopic is the bus's Config.ErrorTopic. Defaults to bus.ErrorTopicDefault.
	ErrorTopic string
	// Token is the access token every request needs; empty serves
	// loopback requests without one. It is never shown. Defaults to none.
	Token string
	// ReadOnly removes every action. Defaults to false.
	ReadOnly bool
	// Limit is how many failed messages and unresolved claims a page looks
	// at, oldest first. Defaults to LimitDefault.
	Limit int
	// Logger logs each request and each action. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Secrets are DSNs and URLs redacted, with their passwords, from every
	// error shown or logged (AMQPURL always is). Defaults to none.
	Secrets []string
	// Metrics are the Prometheus endpoints of running buses
	// ("http://127.0.0.1:9464/metrics"), which Run samples for the
	// overview's charts; without them the charts come from the database
	// (inbox keys received, error topic). Defaults to none.
	Metrics []string
	// SampleInterval is how often Run samples Metrics. Defaults to SampleIntervalDefault.
	SampleInterval time.Duration
	// ChartWindow is the time the overview's charts cover, in 60 bars.
	// Defaults to ChartWindowDefault.
	ChartWindow time.Duration
}

func (c Config) validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("console: Config.DB is required"))
	}
	if err := c.Tables.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("console: %w", err))
	}
	if c.Limit < 0 {
		errs = append(errs, fmt.Errorf("console: Limit %d is negative: leave it 0 for %d", c.Limit, LimitDefault))
	}
	if c.SampleInterval < 0 {
		errs = append(errs, fmt.Errorf("console: SampleInterval %s is negative: leave it 0 for %s", c.SampleInterval, SampleIntervalDefault))
	}
	if c.ChartWindow != 0 && c.ChartWindow < chartBars*time.Second {
		errs = append(errs, fmt.Errorf("console: ChartWindow %s is shorter than a minute: leave it 0 for %s", c.ChartWindow, ChartWindowDefault))
	}
	for _, m := range c.Metrics {
		if u, err := url.Parse(m); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("console: metrics endpoint %q is not an http(s) URL: use e.g. http://127.0.0.1:9464/metrics", store.Redact(m)))
		}
	}
	return errors.Join(errs...)
}

// Console serves the web console; it is an [http.Handler].
type Console struct {
	cfg     Config
	tables  store.Tables
	log     *slog.Logger
	now     func() time.Time
	pages   map[string]*template.Template
	static  http.Handler
	mux     *http.ServeMux
	csrf    string // the process's CSRF token, in every form
	session string // the cookie value a login with the token sets
	queueMu sync.Mutex
	logins  loginLimiter
	// sqlErrors: the database has the SQL transport's error topic.
	sqlErrors atomic.Bool
	sampler   *sampler // nil without Config.Metrics
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// sessionCookie is the name of the cookie a login sets.
const sessionCookie = "postroom_console"

// New returns a console for cfg. It opens nothing: each page reads on request.
func New(cfg Config) (*Console, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: random key: %w", err)
	}
	c := &Console{
		cfg:     cfg,
		tables:  cfg.Tables.WithDefaults(),
		log:     cmp.Or(cfg.Logger, slog.Default()),
		now:     cfg.Now,
		csrf:    mac(key, "csrf"),
		session: mac(key, "session"),
	}
	c.cfg.ErrorTopic = cmp.Or(cfg.ErrorTopic, bus.ErrorTopicDefault)
	c.cfg.Limit = cmp.Or(cfg.Limit, LimitDefault)
	c.cfg.SampleInterval = cmp.Or(cfg.SampleInterval, SampleIntervalDefault)
	c.cfg.ChartWindow = cmp.Or(cfg.ChartWindow, ChartWindowDefault)
	if len(cfg.Metrics) > 0 {
		c.sampler = newSampler(slices.Clone(cfg.Metrics), c.cfg.ChartWindow)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

func mac(key []byte, what string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(what))
	return hex.EncodeToString(h.Sum(nil))
}

// CheckListen refuses to serve addr without a token unless it is a
// loopback address: anyone who reaches the port could act on the bus.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: listen address %q: %w (use host:port, e.g. %s)", addr, err, ListenDefault)
	}
	if token != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("console: %s is not a loopback address: set an access token with --token or $%s, or listen on 127.0.0.1", addr, TokenEnv)
}

// isLoopback reports whether host (no port) is loopback; "" is not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET /static/", c.static)
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("GET /{$}", c.overview)
	m.HandleFunc("GET /failed", c.failedList)
	m.HandleFunc("GET /failed/message", c.failedShow)
	m.HandleFunc("GET /failed/confirm", c.failedConfirm)
	m.HandleFunc("POST /failed/retry", c.failedRetry)
	m.HandleFunc("POST /failed/delete", c.failedDelete)
	m.HandleFunc("GET /unresolved", c.unresolvedList)
	m.HandleFunc("GET /unresolved/confirm", c.unresolvedConfirm)
	m.HandleFunc("POST /unresolved/resolve", c.unresolvedResolve)
	m.HandleFunc("GET /schedules", c.schedulesList)
	m.HandleFunc("POST /schedules/action", c.scheduleAction)
	m.HandleFunc("GET /inbox", c.inboxLookup)
	c.mux = m
}

// redact returns the text of err with every secret redacted.
func (c *Console) redact(err error) string {
	text := err.Error()
	for _, s := range append([]string{c.cfg.AMQPURL, c.cfg.Token}, c.cfg.Secrets...) {
		if s != "" {
			text = dsnparse.RedactText(text, s)
			text = strings.ReplaceAll(text, s, "xxxxx")
		}
	}
	for _, m := range c.cfg.Metrics { // shown, but not a password in them
		text = dsnparse.RedactText(text, m)
	}
	return text
}

// ServeHTTP checks the request (host, the site it came from, token,
// read-only, CSRF, origin) and serves it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.log.Info("console: request", "method", r.Method, "path", r.URL.Path)
	if c.cfg.Token == "" && !isLoopback(hostOf(r.Host)) {
		c.refuse(w, r, http.StatusForbidden, "this console has no access token and answers only to a loopback host name (127.0.0.1, localhost, [::1])")
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		// Another site's page (an <img> at /failed) would make the console
		// browse the error queue, which on RabbitMQ returns each message;
		// same-site includes any other port of localhost (a dev server).
		c.refuse(w, r, http.StatusForbidden, "a page of another site asked for this (Sec-Fetch-Site: "+site+
			"): the console answers only its own pages; open its address directly")
		return
	}
	public := strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/login"
	if bearer, ok := c.bearer(r); ok {
		// A script's request: answered with a status, never the login page.
		if wait := c.logins.blocked(hostOf(r.RemoteAddr), c.now()); wait > 0 {
			c.tooMany(w, r, wait)
			return
		}
		if !equal(bearer, c.cfg.Token) {
			c.logins.failed(hostOf(r.RemoteAddr), c.now())
			w.Header().Set("WWW-Authenticate", `Bearer realm="postroom console"`)
			c.refuse(w, r, http.StatusUnauthorized, "wrong access token in the Authorization header")
			return
		}
	} else if !public && !c.authenticated(r) {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		c.refuse(w, r, http.StatusUnauthorized, "this console needs its access token: log in first")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := c.checkOrigin(r); err != nil {
			c.refuse(w, r, http.StatusForbidden, err.Error())
			return
		}
		if r.URL.Path != "/login" {
			if c.cfg.ReadOnly {
				c.refuse(w, r, http.StatusForbidden, "this console is read-only (--read-only): it changes nothing")
				return
			}
			if !equal(r.PostFormValue("csrf"), c.csrf) {
				c.refuse(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
				return
			}
		}
	}
	c.mux.ServeHTTP(w, r)
}

func hostOf(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// bearer returns r's "Authorization: Bearer" token, when the console has one.
func (c *Console) bearer(r *http.Request) (string, bool) {
	if c.cfg.Token == "" {
		return "", false
	}
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// authenticated reports whether r carries the session cookie of a login;
// always true without a token. (A bearer header is checked before.)
func (c *Console) authenticated(r *http.Request) bool {
	if c.cfg.Token == "" {
		return true
	}
	cookie, err := r.Cookie(sessionCookie)
	return err == nil && equal(cookie.Value, c.session)
}

// checkOrigin refuses a request whose Origin (else Referer) is not the console.
func (c *Console) checkOrigin(r *http.Request) error {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return errors.New("a request that changes something needs an Origin or Referer header of this console")
	}
	u, err := url.Parse(from)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return errors.New("a request that changes something must come from this console's own pages (Origin/Referer mismatch)")
	}
	return nil
}

func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, why string) {
	c.log.Warn("console: refused", "method", r.Method, "path", r.URL.Path, "status", status, "why", why)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, why)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, "login", "Log in", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	addr := hostOf(r.RemoteAddr)
	if wait := c.logins.blocked(addr, c.now()); wait > 0 {
		c.tooMany(w, r, wait)
		return
	}
	if !equal(r.PostFormValue("token"), c.cfg.Token) {
		c.logins.failed(addr, c.now())
		c.log.Warn("console: login with a wrong token", "remote", addr)
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "login", "Log in", map[string]any{"Next": safeNext(r.PostFormValue("next")), "Wrong": true})
		return
	}
	c.logins.succeeded(addr)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: c.session, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// safeNext is next if it is a path of this console, else "/".
func safeNext(next string) string {
	if strings.HasPrefix(next, "/") && !strings.HasPrefix(next, "//") && !strings.Contains(next, `\`) {
		return next
	}
	return "/"
}

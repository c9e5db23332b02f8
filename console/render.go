package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// page is what every template gets.
type page struct {
	Title    string
	Nav      string // the page's path, to mark its link
	ReadOnly bool
	CSRF     string
	Failed   bool // the console has a broker: the failed messages page exists
	Token    bool
	Done     string // what the last action did
	Error    string // what went wrong reading the page
	Now      time.Time
	Data     any
}

var funcs = template.FuncMap{
	"plural": func(n any, one, many string) (string, error) {
		switch n := n.(type) {
		case int:
			return plural(n, one, many), nil
		case int64:
			return plural(int(n), one, many), nil
		}
		return "", fmt.Errorf("plural: %T is not a count", n)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"whenp": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"query": func(kv ...string) template.URL {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				v.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(v.Encode())
	},
	"orDash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
}

func (c *Console) parseTemplates() error {
	names, err := templateFS.ReadDir("templates")
	if err != nil {
		return err
	}
	c.pages = map[string]*template.Template{}
	for _, e := range names {
		name := strings.TrimSuffix(e.Name(), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", path.Join("templates", e.Name()))
		if err != nil {
			return fmt.Errorf("console: template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return nil
}

// render writes the page name with data; a template error is a 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	c.renderPage(w, r, name, page{Title: title, Data: data})
}

func (c *Console) renderPage(w http.ResponseWriter, r *http.Request, name string, p page) {
	p.Nav = "/" + strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]
	p.ReadOnly = c.cfg.ReadOnly
	p.CSRF = c.csrf
	p.Failed = c.failedSource(r.Context()) != ""
	p.Token = c.cfg.Token != ""
	p.Now = c.now()
	if p.Done == "" {
		p.Done = doneText(r.URL.Query())
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.log.Error("console: render", "page", name, "err", c.redact(err))
		http.Error(w, "console: the page could not be rendered (see the console's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// doneText says what the action a page was redirected from did; the
// wording is fixed here, only the subject comes from the query.
func doneText(q url.Values) string {
	format, ok := map[string]string{
		"retried":  "Retried %s: sent back to the handler that failed.",
		"deleted":  "Deleted %s from the error topic.",
		"done":     "Resolved %s as done: a replay is skipped as a duplicate.",
		"released": "Released %s: the next copy runs the handler again.",
		"trigger":  "Triggered %s: the next tick of any instance fires it.",
		"pause":    "Paused %s.",
		"resume":   "Resumed %s.",
	}[q.Get("done")]
	if !ok {
		return ""
	}
	return fmt.Sprintf(format, q.Get("subject"))
}

// redirectDone sends the browser back to to, saying what was done to subject.
func redirectDone(w http.ResponseWriter, r *http.Request, to, done, subject string) {
	http.Redirect(w, r, to+"?"+url.Values{"done": {done}, "subject": {subject}}.Encode(), http.StatusSeeOther)
}

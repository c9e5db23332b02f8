package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/middleware/inbox"
)

// overdueAfter is how late a schedule's next slot may be before the
// overview says it missed it.
const overdueAfter = time.Minute

// attention is one thing the overview puts at the top.
type attention struct {
	Level string // "bad" or "warn"
	Text  string
	Link  string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.now()
	var errs []error
	var todo []attention
	var failed []failedMessage
	failedRead := false
	if c.failedSource(ctx) != "" {
		list, warning, err := c.browse(ctx, false)
		if err != nil {
			errs = append(errs, err)
		} else if failed, failedRead = list, true; len(list) > 0 {
			n := plural(len(list), "failed message", "failed messages")
			if len(list) == c.cfg.Limit {
				n = "at least " + n // the pages read no more
			}
			todo = append(todo, attention{"bad", fmt.Sprintf("%s in the error topic %s (%s)", n,
				c.cfg.ErrorTopic, plural(len(groupFailed(list)), "failure group", "failure groups")), "/failed"})
		}
		if warning != "" {
			todo = append(todo, attention{"warn", warning, "/failed"})
		}
	}
	unresolved, err := claims.ListUnresolved(ctx, c.cfg.DB, c.tables.Inbox, now, c.cfg.Limit)
	unresolvedN := plural(len(unresolved), "unresolved external effect", "unresolved external effects")
	if len(unresolved) == c.cfg.Limit {
		unresolvedN = "at least " + unresolvedN // the read stopped at the limit
	}
	if err != nil {
		errs = append(errs, err)
	} else if len(unresolved) > 0 {
		todo = append(todo, attention{"bad", unresolvedN + ": find out whether each happened, then resolve it", "/unresolved"})
	}
	schedules, err := c.schedules(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, s := range schedules {
		switch {
		case s.Paused:
			todo = append(todo, attention{"warn", "schedule " + s.Name + " is paused", "/schedules"})
		case now.Sub(s.NextRunAt) > overdueAfter:
			todo = append(todo, attention{"warn", fmt.Sprintf("schedule %s is %s late: is any instance running its scheduler?", s.Name,
				now.Sub(s.NextRunAt).Round(time.Second)), "/schedules"})
		}
	}
	delayed, nextDue, err := storeinfo.DelayedSummary(ctx, c.cfg.DB)
	if err != nil {
		delayed = -1 // no delayed table (the schema not migrated): not shown
	} else if delayed > 0 && now.Sub(nextDue) > overdueAfter {
		what := fmt.Sprintf("the earliest of %d delayed messages", delayed)
		if delayed == 1 {
			what = "the one delayed message"
		}
		todo = append(todo, attention{"warn", fmt.Sprintf("%s is %s past its due time: is any bus running on this database?",
			what, now.Sub(nextDue).Round(time.Second)), "/"})
	}
	tables, err := storeinfo.Stats(ctx, c.cfg.DB, c.tables)
	if err != nil {
		errs = append(errs, err)
	}
	consumers, err := storeinfo.InboxSummary(ctx, c.cfg.DB, c.tables)
	if err != nil {
		errs = append(errs, err)
	}
	charts, err := c.charts(ctx, now, failed, failedRead, consumers)
	if err != nil {
		errs = append(errs, err)
	}
	p := page{Title: "Overview", Data: map[string]any{"Attention": todo, "Tables": tables, "Consumers": consumers,
		"Schedules": len(schedules), "Unresolved": unresolvedN, "Delayed": delayed, "Charts": charts}}
	if err := errors.Join(errs...); err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "overview", p)
}

func (c *Console) schedules(ctx context.Context) ([]schedcontrol.Stored, error) {
	ctl, err := schedcontrol.New(c.cfg.DB, c.tables.Schedules)
	if err != nil {
		return nil, err
	}
	return ctl.List(ctx)
}

// scheduleRow is a schedule as the page shows it.
type scheduleRow struct {
	schedcontrol.Stored
	Overdue bool
}

func (c *Console) schedulesList(w http.ResponseWriter, r *http.Request) {
	list, err := c.schedules(r.Context())
	rows := make([]scheduleRow, len(list))
	for i, s := range list {
		rows[i] = scheduleRow{s, !s.Paused && c.now().Sub(s.NextRunAt) > overdueAfter}
	}
	p := page{Title: "Schedules", Data: rows}
	if err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "schedules", p)
}

func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PostFormValue("name"), r.PostFormValue("action")
	ctl, err := schedcontrol.New(c.cfg.DB, c.tables.Schedules)
	if err == nil {
		switch action {
		case "trigger":
			err = ctl.Trigger(r.Context(), name, c.now())
		case "pause":
			err = ctl.Pause(r.Context(), name)
		case "resume":
			err = ctl.Resume(r.Context(), name)
		default:
			err = fmt.Errorf("unknown action %q: trigger, pause or resume", action)
		}
	}
	if err != nil {
		c.log.Warn("console: schedule action failed", "schedule", name, "action", action, "err", c.redact(err))
		http.Error(w, c.redact(err), http.StatusConflict)
		return
	}
	c.log.Info("console: schedule "+action, "schedule", name)
	redirectDone(w, r, "/schedules", action, name)
}

// unresolvedRow is an unresolved claim with its idempotency key.
type unresolvedRow struct {
	claims.Unresolved
	IdempotencyKey string
}

func (c *Console) unresolved(ctx context.Context) ([]unresolvedRow, error) {
	list, err := claims.ListUnresolved(ctx, c.cfg.DB, c.tables.Inbox, c.now(), c.cfg.Limit)
	rows := make([]unresolvedRow, len(list))
	for i, u := range list {
		rows[i] = unresolvedRow{u, idempotency.Key(u.Consumer, u.Source, u.MessageID)}
	}
	return rows, err
}

func (c *Console) unresolvedList(w http.ResponseWriter, r *http.Request) {
	rows, err := c.unresolved(r.Context())
	p := page{Title: "Unresolved external effects", Data: rows}
	if err != nil {
		p.Error = c.redact(err)
	}
	c.renderPage(w, r, "unresolved", p)
}

func (c *Console) unresolvedConfirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	resolution := q.Get("resolution")
	attempts, err := attemptsOf(q.Get("attempts"))
	p := page{Title: "Confirm", Data: map[string]any{"Consumer": q.Get("consumer"), "Source": q.Get("source"), "MessageID": q.Get("id"),
		"Resolution": resolution, "Attempts": attempts,
		"IdempotencyKey": idempotency.Key(q.Get("consumer"), q.Get("source"), q.Get("id"))}}
	switch {
	case resolution != "done" && resolution != "release":
		p.Error = "the resolution is done or release"
	case err != nil:
		p.Error = err.Error()
	}
	c.renderPage(w, r, "confirm_resolve", p)
}

// attemptsOf reads the claim's attempt a page showed (claims.ResolveAttempt).
func attemptsOf(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, errors.New("the link names no attempt of the claim: open it from the unresolved external effects page, " +
			"which resolves only the attempt it shows")
	}
	return n, nil
}

func (c *Console) unresolvedResolve(w http.ResponseWriter, r *http.Request) {
	consumer, id := r.PostFormValue("consumer"), r.PostFormValue("id")
	key := inbox.Key{Source: r.PostFormValue("source"), MessageID: id}
	res, done := claims.Happened, "done"
	switch r.PostFormValue("resolution") {
	case "done":
	case "release":
		res, done = claims.DidNotHappen, "released"
	default:
		http.Error(w, "the resolution is done or release", http.StatusBadRequest)
		return
	}
	attempts, err := attemptsOf(r.PostFormValue("attempts"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// Only the attempt the confirmation showed: it may have moved on since.
	if err := claims.ResolveAttempt(r.Context(), c.cfg.DB, c.tables.Inbox, consumer, key, attempts, res, c.now()); err != nil {
		c.log.Warn("console: resolve failed", "consumer", consumer, "message", id, "attempt", attempts, "err", c.redact(err))
		text := c.redact(err)
		if errors.Is(err, claims.ErrClaimChanged) {
			text += ": open the unresolved external effects page again"
		}
		http.Error(w, text, http.StatusConflict)
		return
	}
	c.log.Info("console: resolved", "consumer", consumer, "message", id, "attempt", attempts, "as", done)
	redirectDone(w, r, "/unresolved", done, "message "+id+" of "+consumer)
}

// inboxKey is one consumer's key of a message, with its duplicates.
type inboxKey struct {
	Consumer, Source, MessageID, MessageType string
	ReceivedAt                               time.Time
	// Status is done, or an External claim's processing, parked or released.
	Status     string
	Duplicates int64
}

// lookupInbox returns the keys of message id in the inbox table, for
// consumer or (empty) every consumer, at most limit.
func (c *Console) lookupInbox(ctx context.Context, id, consumer string, limit int) ([]inboxKey, error) {
	d, err := dialects.Of(c.cfg.DB)
	if err != nil {
		return nil, err
	}
	query, err := dialect.InboxLookup(c.tables.Inbox)
	if err != nil {
		return nil, err
	}
	rows, err := c.cfg.DB.WithContext(ctx).Raw(query, id, consumer, consumer, limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("console: look up %s: %w", id, err)
	}
	defer rows.Close()
	var out []inboxKey
	for rows.Next() {
		var k inboxKey
		var received any
		if err := rows.Scan(&k.Consumer, &k.Source, &k.MessageID, &k.MessageType, &received, &k.Status, &k.Duplicates); err != nil {
			return nil, fmt.Errorf("console: look up %s: %w", id, err)
		}
		if k.ReceivedAt, err = d.ParseTime(received); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (c *Console) inboxLookup(w http.ResponseWriter, r *http.Request) {
	id, consumer := r.URL.Query().Get("id"), r.URL.Query().Get("consumer")
	data := map[string]any{"ID": id, "Consumer": consumer}
	p := page{Title: "Inbox lookup", Data: data}
	if id != "" {
		keys, err := c.lookupInbox(r.Context(), id, consumer, 100)
		data["Keys"], data["Searched"] = keys, true
		if err != nil {
			p.Error = c.redact(err)
		}
	}
	c.renderPage(w, r, "inbox", p)
}

// plural is n with one or many after it: "2 failed messages".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

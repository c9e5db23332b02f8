// Package console is postroom's web console for the people on call: the
// pages `postroom console` serves from the one binary, with every template,
// style sheet and script embedded (no CDN, no network at run time).
//
// # Pages
//
//   - Overview: what needs attention first (failed messages, unresolved
//     external effects, paused or overdue schedules), charts of the last
//     hour per handler (handled, duplicates, stale, failed), then the inbox
//     and watermark tables and the inbox per consumer. The charts come
//     from the database (the inbox keys received, the error topic's
//     failures), or from the Prometheus endpoints of running buses in
//     [Config.Metrics], which [Console.Run] samples.
//   - Failed messages: the error topic, on RabbitMQ ([Config.AMQPURL]) or
//     the SQL transport (its table in [Config.DB]), grouped by endpoint
//     group (the failing handler's subscriber group, which tells
//     endpoints apart), handler and the shape of the reason (IDs and numbers as
//     …); one message's metadata and body; retry (back to the handler
//     that failed, alone, as `postroom errors replay`; on the SQL
//     transport through the delayed table) and delete, each after a
//     confirmation page. The in-memory transport's error topic is in its
//     application's memory: not shown.
//   - Unresolved external effects: the claims whose outcome is unknown,
//     with their idempotency key; resolve as done or release.
//   - Schedules: next slot and when it last fired; trigger, pause, resume.
//   - Inbox lookup: which consumers hold a key for a message ID, when it
//     was received and how many duplicates were skipped.
//
// # Security
//
// [CheckListen] refuses an address other than loopback without a token.
// With a token, every request needs it: a login form sets a session
// cookie (HttpOnly, SameSite=Strict), or the request carries
// "Authorization: Bearer <token>" (a wrong one gets 401). Five wrong
// tokens from one address within a minute and it gets 429 with
// Retry-After ([LoginFailuresDefault]). Without a token, only requests whose
// Host is a loopback name are served (against DNS rebinding). Every action
// is a POST that carries the process's CSRF token in a hidden field
// (compared in constant time) and an Origin or Referer of the console
// itself. [Config.ReadOnly] removes every action: no buttons, and every
// POST but the login is refused with 403. No page and no log line shows
// the DSN, the broker URL or the token.
package console

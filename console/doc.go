// Package console is postroom's web console for the people on call: the
// pages `postroom console` serves from the one binary, with every template,
// style sheet and script embedded (no CDN, no network at run time).
//
// # Pages
//
//   - Overview: what needs attention first (failed messages, unresolved
//     external effects, paused or overdue schedules), then the inbox and
//     watermark tables and the inbox per consumer.
//   - Failed messages: the error topic's queue on RabbitMQ, grouped by
//     handler and reason; one message's metadata and body; retry (replay to
//     the handler that failed, as `postroom errors replay`) and delete,
//     each after a confirmation page.
//   - Unresolved external effects: the claims whose outcome is unknown,
//     with their idempotency key; resolve as done or release.
//   - Schedules: next and last slot; trigger, pause, resume.
//   - Inbox lookup: which consumers hold a key for a message ID, when it
//     was received and how many duplicates were skipped.
//
// # Security
//
// [CheckListen] refuses an address other than loopback without a token.
// With a token, every request needs it: a login form sets a session
// cookie (HttpOnly, SameSite=Strict), or the request carries
// "Authorization: Bearer <token>". Without a token, only requests whose
// Host is a loopback name are served (against DNS rebinding). Every action
// is a POST that carries the process's CSRF token in a hidden field
// (compared in constant time) and an Origin or Referer of the console
// itself. [Config.ReadOnly] removes every action: no buttons, and every
// POST but the login is refused with 403. No page and no log line shows
// the DSN, the broker URL or the token.
package console

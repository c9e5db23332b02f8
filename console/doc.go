// Package console is postroom's web console for the people on call: the
// pages `postroom console` serves from the one binary, with every template,
// style sheet and script embedded (no CDN, no network at run time).
//
// # Pages
//
//   - Overview: what needs attention first (failed messages, unresolved
//     external effects, paused or overdue schedules), charts per handler
//     (from the database, or the buses' [Config.Metrics]), the inbox and
//     watermark tables and the inbox per consumer.
//   - Failed messages: the error topic on RabbitMQ ([Config.AMQPURL]) or
//     the SQL transport, grouped by endpoint group, handler and the shape
//     of the reason; one message's metadata and body; retry (as `postroom
//     errors replay`) and delete, each after a confirmation page. The
//     in-memory transport's error topic is not shown.
//   - Unresolved external effects: the claims whose outcome is unknown,
//     with their idempotency key; resolve as done or release.
//   - Schedules: next slot and when it last fired; trigger, pause, resume.
//   - Inbox lookup: which consumers hold a key for a message ID, when it
//     was received and how many duplicates were skipped.
//
// # Security
//
// [CheckListen] refuses an address other than loopback without a token.
// With a token, every request needs it: a login sets a session cookie
// (HttpOnly, SameSite=Strict), or the request carries "Authorization:
// Bearer <token>" (a wrong one gets 401); [LoginFailuresDefault] wrong
// tokens from one address within a minute get 429. Without a token, only
// loopback Host names are served (against DNS rebinding). Every action is
// a POST with the process's CSRF token and an Origin or Referer of the
// console itself. [Config.ReadOnly] removes every action (other POSTs get
// 403). No page or log line shows the DSN, the broker URL or the token.
package console

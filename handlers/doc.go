// Package handlers holds postroom's built-in handlers.
//
// # CleanupStore
//
// [CleanupStore] is an ordinary message; [Cleanup.Handle] deletes inbox and
// watermark rows older than its cut-off in bounded batches, each batch its
// own short statement (and so its own transaction), with the efficient
// DELETE of each dialect, and reports what it deleted. It is idempotent by
// nature (a repeat deletes nothing more), so it does not use the inbox. The
// bus schedules it on one instance per slot; see package scheduler.
package handlers

// Package uow is the unit of work behind middleware/unitofwork: the
// transaction of each message, begun at first use, and the batches that
// share one transaction, each message in a savepoint of its own.
//
// Besides what middleware/unitofwork offers, postroom's own packages use
// [Exec] and [QueryRow] (the inbox's and stale check's statements, straight
// on the driver), [AfterRollback] (a duplicate counted once a batch member
// is rolled back), [Savepoint], [Alone] (a message handled in a batch of
// its own) and the [Collector] (the batches of bus.HandleBatch).
package uow

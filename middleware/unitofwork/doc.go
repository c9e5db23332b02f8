// Package unitofwork runs each message in one database transaction.
//
// The middleware returned by [New] begins a transaction, puts it in the
// message context, calls the handler, and commits when the handler returns
// nil; it rolls back when the handler returns an error or panics (the panic
// goes on up, to the router's recoverer). Handlers reach the transaction
// with [Tx]; the inbox and stale-update middlewares join it, so a handler's
// business writes, the inbox key and the entity watermark commit or vanish
// together.
//
// A middleware that decides, inside the unit of work, that the message must
// not be handled (a duplicate, a stale update) calls [RollbackOnly] and
// returns without error: the transaction is rolled back and the message is
// acked.
package unitofwork

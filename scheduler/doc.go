// Package scheduler runs durable schedules stored in the database, safely
// on any number of instances.
//
// A [Schedule] fires every interval or on a cron expression. Schedules are
// defined in code; [Scheduler.Define] stores a new one and keeps the state
// (next run, pause) of one that exists, so a restart resets nothing. A
// schedule whose Every or Cron changed starts afresh at its next slot (an
// old slot missed meanwhile is not fired).
//
// Each tick, an instance claims a due slot with a compare-and-set on
// next_run_at, in the same transaction as the emit: only the instance
// whose UPDATE affected a row emits, so a slot fires once whatever the
// number of instances and restarts. On PostgreSQL and MySQL the claim
// first locks the row with SKIP LOCKED, so an emit that hangs holds back
// its own schedule alone (and, on MariaDB, a starting instance's Define)
// until its transaction ends; bound that with PostgreSQL's
// idle_in_transaction_session_timeout or MariaDB's idle_transaction_timeout.
// On SQLite a hung emit holds back every writer. A schedule's Name is its
// row: services sharing the table must not share a name. [EmitFunc] gets
// the transaction (for an outbox) and the slot time, from which the bus
// derives a deterministic message ID ([SlotID]) for the inbox to absorb
// repeats.
//
// # Missed slots
//
// When an instance finds more than one slot due (all instances were down),
// the schedule's [MissedPolicy] decides: [RunOnce] (the default) emits one
// slot and continues on the schedule, [Skip] emits none of the missed slots,
// and [CatchUp] emits each missed slot, at most CatchUpLimit of them (the
// most recent).
//
// # Clocks
//
// Each instance times slots by its own clock; one running ahead fires
// slots early and the others never fire them: keep clocks in sync (NTP).
// [Scheduler.Run] warns when this process's clock is more than 30 s off
// the database's, and checks store.CheckTimeZone on MySQL. The clock is
// injectable ([Config.Now]). This package never imports the bus.
package scheduler

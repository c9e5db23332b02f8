// Package scheduler runs durable schedules stored in the database, safely
// on any number of instances.
//
// A [Schedule] fires every interval or on a cron expression. Schedules are
// defined in code; [Scheduler.Define] stores a new one and keeps the state
// (next run, pause) of one that exists, so a restart resets nothing. A
// schedule whose Every or Cron changed starts afresh at its next slot: a
// slot of the old definition that fell due while no instance ran is not
// fired (during a rolling deploy, instances of the two definitions each
// set it again as they start). Each
// tick, an instance reads the due schedules and claims a due slot with a
// compare-and-set on next_run_at, in the same transaction as the emit: only
// the instance whose UPDATE affected a row emits, so a slot fires once
// whatever the number of instances and restarts. On PostgreSQL and MySQL
// the claim first locks the schedule's row with SKIP LOCKED: a slot whose
// claim another instance holds (its emit still running) is skipped, not
// waited for, so an emit that hangs holds back its own schedule alone
// (and, on MariaDB, the Define of a starting instance, whose check of the
// stored timing locks the row), until its transaction ends (a process that is paused or cut off holds it
// until the database ends its session: set PostgreSQL's
// idle_in_transaction_session_timeout, or MariaDB's
// idle_transaction_timeout, to bound that). On SQLite a write locks the
// whole database, so a hung emit holds back every writer. A schedule's
// Name is its row: two services that share the table must not use one
// name, or only the first to claim each slot fires it (the bus's cleanup
// schedule carries its endpoint in its name). [EmitFunc] gets that
// transaction (for an outbox) and the slot time, from which the bus derives a
// deterministic message ID ([SlotID]), so a repeat is absorbed by the inbox.
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
// Each instance times slots by its own clock. One whose clock runs ahead
// fires a slot early and moves next_run_at past every slot up to its own
// time, which the other instances then never fire: keep the instances'
// clocks in sync (NTP). [Scheduler.Run] warns when this process's clock is
// more than 30 s off the database's. On MySQL the
// connection must not convert times to another zone (store.CheckTimeZone,
// which Run checks).
//
// The clock is injectable ([Config.Now]), so a month of schedules runs in
// milliseconds in tests. This package never imports the bus.
package scheduler

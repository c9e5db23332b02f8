package dialect

// GroupStart holds the statements that give a consumer group of a topic
// its offsets row, if it has none: at the end of the topic's message table
// for an event topic (the group reads what is committed from then on, as a
// new queue on a broker does, not the table's whole history), at its start
// for a command topic (watermill-sql's own choice for every group).
// Having the row also spares MySQL's adapter its gap locks: the group's
// subscriptions lock one existing row.
type GroupStart struct {
	// Exists reads one row when the group (the argument) has its row; a
	// plain read, so it never waits for a subscription that holds the row
	// locked while its message is handled.
	Exists string
	// End returns the position to start at, for Insert's second argument
	// (MySQL only; "" on PostgreSQL).
	End string
	// Insert adds the group's row at the end (arguments: the group, then
	// End's result on MySQL), doing nothing if it exists.
	Insert string
	// InsertAtStart adds the group's row at the first message (argument:
	// the group), doing nothing if it exists: a command topic keeps what
	// was sent before its endpoint first ran.
	InsertAtStart string
}

// GroupsBinaryUpgrade holds the statements that make the group column of
// a topic's offsets table binary on MySQL/MariaDB where a table created
// by watermill-sql, or by an older postroom, has it case insensitive.
type GroupsBinaryUpgrade struct {
	// Check returns the column's data type, lower case (no row: no such
	// table). Argument: Table.
	Check string
	// Table is the offsets table's name, unquoted.
	Table string
	// Wait reads the session's lock_wait_timeout; SetWait (a format for
	// the seconds) sets it, so that Alter waits that long at most for the
	// table, and then the value Wait read back.
	Wait, SetWait string
	// Alter changes the column.
	Alter string
}

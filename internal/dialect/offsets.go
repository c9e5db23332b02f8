package dialect

// GroupStart holds the statements that give a group its offsets row on a
// topic, if it has none: at the table's end for an event topic (as a new
// broker queue), at its start for a command topic. An existing row also
// spares MySQL's adapter its gap locks.
type GroupStart struct {
	// Exists reads one row when the group (the argument) has its row; a
	// plain read, never waiting for a subscription holding it locked.
	Exists string
	// End reads Insert's start position (MySQL; "" elsewhere).
	End string
	// Insert adds the group's row at the end (arguments: the group, then
	// End's result on MySQL), doing nothing if it exists.
	Insert string
	// InsertAtStart is Insert at the first message (argument: the group).
	InsertAtStart string
}

// GroupsBinaryUpgrade holds the statements that make an older MySQL/MariaDB
// offsets table's case-insensitive group column binary.
type GroupsBinaryUpgrade struct {
	// Check reads the column's type, lower case (argument: Table).
	Check string
	// Table is the offsets table's name, unquoted.
	Table string
	// Wait reads the session's lock_wait_timeout; SetWait (a format for
	// the seconds) sets it for Alter, then back to what Wait read.
	Wait, SetWait string
	// Alter changes the column.
	Alter string
}

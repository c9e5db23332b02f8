package dialect

import (
	"cmp"
	"errors"
	"strconv"
	"strings"
)

// Tables names postroom's tables. Unset fields fall back to the defaults.
type Tables struct {
	// Inbox holds one row per handled message key. Defaults to "postroom_inbox".
	Inbox string
	// Watermarks holds the newest applied version per entity. Defaults to "postroom_stale_watermarks".
	Watermarks string
	// Schedules holds the durable schedules. Defaults to "postroom_schedules".
	Schedules string
	// Migrations records the applied schema versions. Defaults to "postroom_migrations".
	Migrations string
	// Delayed holds messages sent for later delivery. Defaults to "postroom_delayed".
	Delayed string
	// Deliveries counts the redeliveries of messages on a transport that
	// does not count them itself. Defaults to "postroom_deliveries".
	Deliveries string
}

// Default table names.
const (
	InboxTableDefault      = "postroom_inbox"
	WatermarksTableDefault = "postroom_stale_watermarks"
	SchedulesTableDefault  = "postroom_schedules"
	MigrationsTableDefault = "postroom_migrations"
	DelayedTableDefault    = "postroom_delayed"
	DeliveriesTableDefault = "postroom_deliveries"
)

// WithDefaults returns t with every unset name filled in.
func (t Tables) WithDefaults() Tables {
	return Tables{
		Inbox:      cmp.Or(t.Inbox, InboxTableDefault),
		Watermarks: cmp.Or(t.Watermarks, WatermarksTableDefault),
		Schedules:  cmp.Or(t.Schedules, SchedulesTableDefault),
		Migrations: cmp.Or(t.Migrations, MigrationsTableDefault),
		Delayed:    cmp.Or(t.Delayed, DelayedTableDefault),
		Deliveries: cmp.Or(t.Deliveries, DeliveriesTableDefault),
	}
}

// Validate reports every name that is not a valid identifier.
func (t Tables) Validate() error {
	t = t.WithDefaults()
	return errors.Join(
		ValidateIdentifier(t.Inbox),
		ValidateIdentifier(t.Watermarks),
		ValidateIdentifier(t.Schedules),
		ValidateIdentifier(t.Migrations),
		ValidateIdentifier(t.Delayed),
		ValidateIdentifier(t.Deliveries),
	)
}

// Migration is one versioned step of postroom's schema.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// indexName derives an index name from a possibly schema-qualified table.
func indexName(table, suffix string) string {
	return unqualified(table) + "_" + suffix
}

// MigrationStatements are the statements on the migrations table, built
// once by [Dialect.MigrationsTable].
type MigrationStatements struct {
	// Create creates the table if it does not exist.
	Create string
	// Applied counts the rows of one version (0 or 1). Argument: version.
	Applied string
	// Record records a version as applied. Arguments: version, name, applied_at.
	Record string
}

// MigrationsTable validates table and returns the statements on it.
func (d Dialect) MigrationsTable(table string) (MigrationStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return MigrationStatements{}, err
	}
	return MigrationStatements{
		Create:  "CREATE TABLE IF NOT EXISTS " + table + " (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at " + d.timestamp() + " NOT NULL)",
		Applied: "SELECT COUNT(*) FROM " + table + " WHERE version = ?",
		Record:  "INSERT INTO " + table + " (version, name, applied_at) VALUES (?, ?, ?)",
	}, nil
}

func (d Dialect) timestamp() string {
	switch d {
	case Postgres:
		return "TIMESTAMPTZ"
	case MySQL:
		return "DATETIME(6)"
	default:
		return "TEXT"
	}
}

func (d Dialect) boolean() string {
	if d == MySQL {
		return "TINYINT(1)"
	}
	return "BOOLEAN"
}

// Migrations returns postroom's schema as versioned steps, oldest first.
// A step, once released, never changes: new schema goes in a new step.
func (d Dialect) Migrations(t Tables) []Migration {
	t = t.WithDefaults()
	ts, id := d.timestamp(), "VARCHAR(200)"
	return []Migration{
		{Version: 1, Name: "inbox", Statements: d.tableWithIndex(t.Inbox,
			"consumer "+id+" NOT NULL, source "+id+" NOT NULL, message_id "+id+" NOT NULL, message_type VARCHAR(255) NOT NULL, received_at "+ts+" NOT NULL, PRIMARY KEY (consumer, source, message_id)",
			"received_at", true)},
		{Version: 2, Name: "stale watermarks", Statements: d.tableWithIndex(t.Watermarks,
			"message_type VARCHAR(255) NOT NULL, entity_id "+id+" NOT NULL, version_at BIGINT NOT NULL, message_id "+id+" NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (message_type, entity_id)",
			"updated_at", false)},
		{Version: 3, Name: "schedules", Statements: []string{
			"CREATE TABLE IF NOT EXISTS " + t.Schedules + " (name " + id + " NOT NULL PRIMARY KEY, spec VARCHAR(255) NOT NULL, next_run_at " + ts + " NOT NULL, last_run_at " + ts + " NULL, last_fired_by " + id + " NOT NULL DEFAULT '', paused " + d.boolean() + " NOT NULL DEFAULT FALSE, updated_at " + ts + " NOT NULL)",
		}},
		{Version: 4, Name: "inbox claims, message log and duplicate counts", Statements: d.addColumns(t.Inbox,
			"status VARCHAR(16) NOT NULL DEFAULT '"+StatusDone+"'",
			"lease_until "+ts+" NULL",
			"attempts INTEGER NOT NULL DEFAULT 1",
			"checksum VARCHAR(64) NOT NULL DEFAULT ''",
			"payload "+d.blob()+" NULL",
			"duplicates INTEGER NOT NULL DEFAULT 0",
		)},
		{Version: 5, Name: "watermarks per consumer; key columns compare bytes exactly", Statements: d.exactKeys(t)},
		{Version: 6, Name: "outbox tables", Statements: d.OutboxTables(OutboxTopicDefault)},
		{Version: 7, Name: "delayed messages", Statements: d.tableWithIndex(t.Delayed,
			d.serial()+", due_at "+ts+" NOT NULL, topic VARCHAR(255) NOT NULL, target_group VARCHAR(255) NOT NULL DEFAULT '', message_id VARCHAR(255) NOT NULL, payload "+d.blob()+" NULL, metadata TEXT NOT NULL, created_at "+ts+" NOT NULL",
			"due_at", false)},
		{Version: 8, Name: "outbox rows acked one by one on MySQL", Statements: d.OutboxAckedRows(OutboxTopicDefault)},
		{Version: 9, Name: "redeliveries counted across processes", Statements: d.tableWithIndex(t.Deliveries,
			"consumer "+d.exactKey(200)+" NOT NULL, message_id "+d.exactKey(200)+" NOT NULL, deliveries INTEGER NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (consumer, message_id)",
			"updated_at", false)},
	}
}

// exactKeys gives every watermark a consumer (its primary key becomes
// consumer, message_type, entity_id; rows from before belong to consumer
// ”, which the bus copies to each of its consumers at start) and makes
// every key column compare bytes exactly: MySQL's default collation ignores
// case and trailing spaces, so its key columns become VARBINARY; on
// PostgreSQL they take the "C" collation, so that the stale tie-break
// orders message IDs by bytes as MySQL and SQLite do; SQLite compares
// bytes already.
func (d Dialect) exactKeys(t Tables) []string {
	wm := t.Watermarks
	switch d {
	case Postgres:
		key := func(n int) string { return "VARCHAR(" + strconv.Itoa(n) + ") COLLATE \"C\"" }
		return []string{
			"ALTER TABLE " + wm + " ADD COLUMN IF NOT EXISTS consumer " + key(200) + " NOT NULL DEFAULT ''",
			// The primary key's name is PostgreSQL's choice (cut short for a
			// long table name): look it up.
			"DO $pk$ DECLARE c text; BEGIN SELECT conname INTO c FROM pg_constraint WHERE conrelid = '" + wm + "'::regclass AND contype = 'p';" +
				" IF c IS NOT NULL THEN EXECUTE 'ALTER TABLE " + wm + " DROP CONSTRAINT ' || quote_ident(c); END IF; END $pk$",
			"ALTER TABLE " + wm + " ADD PRIMARY KEY (consumer, message_type, entity_id)",
			"ALTER TABLE " + wm + " ALTER COLUMN message_type TYPE " + key(255) + ", ALTER COLUMN entity_id TYPE " + key(200) + ", ALTER COLUMN message_id TYPE " + key(200),
			"ALTER TABLE " + t.Inbox + " ALTER COLUMN consumer TYPE " + key(200) + ", ALTER COLUMN source TYPE " + key(200) + ", ALTER COLUMN message_id TYPE " + key(200),
			"ALTER TABLE " + t.Schedules + " ALTER COLUMN name TYPE " + key(200),
		}
	case MySQL:
		// One ALTER per table, each atomic: a rerun after a cut-short step
		// meets "duplicate column" on the first only if it had committed.
		return []string{
			"ALTER TABLE " + wm + " ADD COLUMN consumer VARBINARY(200) NOT NULL DEFAULT '' FIRST," +
				" MODIFY message_type VARBINARY(255) NOT NULL, MODIFY entity_id VARBINARY(200) NOT NULL, MODIFY message_id VARBINARY(200) NOT NULL," +
				" DROP PRIMARY KEY, ADD PRIMARY KEY (consumer, message_type, entity_id)",
			"ALTER TABLE " + t.Inbox + " MODIFY consumer VARBINARY(200) NOT NULL, MODIFY source VARBINARY(200) NOT NULL, MODIFY message_id VARBINARY(200) NOT NULL",
			"ALTER TABLE " + t.Schedules + " MODIFY name VARBINARY(200) NOT NULL",
		}
	default:
		// SQLite cannot change a primary key: the table is rebuilt.
		next := wm + "_v5"
		return []string{
			"CREATE TABLE " + next + " (consumer VARCHAR(200) NOT NULL DEFAULT '', message_type VARCHAR(255) NOT NULL, entity_id VARCHAR(200) NOT NULL," +
				" version_at BIGINT NOT NULL, message_id VARCHAR(200) NOT NULL, updated_at " + d.timestamp() + " NOT NULL, PRIMARY KEY (consumer, message_type, entity_id))",
			"INSERT INTO " + next + " (consumer, message_type, entity_id, version_at, message_id, updated_at) SELECT '', message_type, entity_id, version_at, message_id, updated_at FROM " + wm,
			"DROP TABLE " + wm,
			"ALTER TABLE " + next + " RENAME TO " + unqualified(wm),
			"CREATE INDEX IF NOT EXISTS " + indexName(wm, "updated_at") + " ON " + wm + " (updated_at)",
		}
	}
}

// exactKey is the type of a key column that compares bytes exactly, as
// exactKeys makes them.
func (d Dialect) exactKey(n int) string {
	switch d {
	case Postgres:
		return "VARCHAR(" + strconv.Itoa(n) + ") COLLATE \"C\""
	case MySQL:
		return "VARBINARY(" + strconv.Itoa(n) + ")"
	default:
		return "VARCHAR(" + strconv.Itoa(n) + ")"
	}
}

// unqualified is a table's name without its schema.
func unqualified(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// serial is an auto-incremented primary key column named id.
func (d Dialect) serial() string {
	switch d {
	case Postgres:
		return "id BIGSERIAL PRIMARY KEY"
	case MySQL:
		return "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
	default:
		return "id INTEGER PRIMARY KEY AUTOINCREMENT"
	}
}

func (d Dialect) blob() string {
	switch d {
	case Postgres:
		return "BYTEA"
	case MySQL:
		return "LONGBLOB"
	default:
		return "BLOB"
	}
}

// addColumns adds columns to a table. PostgreSQL skips a column that
// exists; on MySQL the one ALTER is atomic, and the migration treats
// "duplicate column" as already applied (a step cut short after the ALTER
// committed); SQLite adds one column per statement inside the step's
// transaction.
func (d Dialect) addColumns(table string, columns ...string) []string {
	switch d {
	case Postgres:
		return []string{"ALTER TABLE " + table + " ADD COLUMN IF NOT EXISTS " + strings.Join(columns, ", ADD COLUMN IF NOT EXISTS ")}
	case MySQL:
		return []string{"ALTER TABLE " + table + " ADD COLUMN " + strings.Join(columns, ", ADD COLUMN ")}
	default:
		out := make([]string, len(columns))
		for i, c := range columns {
			out[i] = "ALTER TABLE " + table + " ADD COLUMN " + c
		}
		return out
	}
}

// tableWithIndex creates a table and an index on one time column, both
// idempotently, so a migration step cut short (MySQL commits DDL at once)
// can be run again. appendOnly tables get a BRIN index on PostgreSQL: their
// rows arrive in time order, so a tiny index finds the old pages.
func (d Dialect) tableWithIndex(table, columns, indexed string, appendOnly bool) []string {
	index := indexName(table, indexed)
	switch d {
	case MySQL:
		return []string{"CREATE TABLE IF NOT EXISTS " + table + " (" + columns + ", INDEX " + index + " (" + indexed + "))"}
	case Postgres:
		using := ""
		if appendOnly {
			using = " USING BRIN"
		}
		return []string{
			"CREATE TABLE IF NOT EXISTS " + table + " (" + columns + ")",
			"CREATE INDEX IF NOT EXISTS " + index + " ON " + table + using + " (" + indexed + ")",
		}
	default:
		return []string{
			"CREATE TABLE IF NOT EXISTS " + table + " (" + columns + ")",
			"CREATE INDEX IF NOT EXISTS " + index + " ON " + table + " (" + indexed + ")",
		}
	}
}

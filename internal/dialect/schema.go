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
}

// Default table names. The migrations, delayed and deliveries tables
// always have theirs.
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
	}
}

// Validate reports every name that is not a valid identifier.
func (t Tables) Validate() error {
	t = t.WithDefaults()
	return errors.Join(
		ValidateIdentifier(t.Inbox),
		ValidateIdentifier(t.Watermarks),
		ValidateIdentifier(t.Schedules),
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
// Version 1 creates every table in its present form. A step, once
// released, never changes: new schema goes in a new step (version 2 on),
// and is tested by migrating a database up from version 1.
//
// Key columns compare bytes exactly (exactKey): the inbox keys, the
// watermarks, the schedules' names and the redelivery counts.
func (d Dialect) Migrations(t Tables) []Migration {
	t = t.WithDefaults()
	ts, key := d.timestamp(), d.exactKey
	var schema []string
	schema = append(schema, d.tableWithIndex(t.Inbox,
		"consumer "+key(200)+" NOT NULL, source "+key(200)+" NOT NULL, message_id "+key(200)+" NOT NULL, message_type VARCHAR(255) NOT NULL, received_at "+ts+" NOT NULL,"+
			" status VARCHAR(16) NOT NULL DEFAULT '"+StatusDone+"', lease_until "+ts+" NULL, attempts INTEGER NOT NULL DEFAULT 1, checksum VARCHAR(64) NOT NULL DEFAULT '',"+
			" payload "+d.blob()+" NULL, duplicates INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (consumer, source, message_id)",
		"received_at", true)...)
	schema = append(schema, d.tableWithIndex(t.Watermarks,
		"consumer "+key(200)+" NOT NULL DEFAULT '', message_type "+key(255)+" NOT NULL, entity_id "+key(200)+" NOT NULL, version_at BIGINT NOT NULL,"+
			" message_id "+key(200)+" NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (consumer, message_type, entity_id)",
		"updated_at", false)...)
	schema = append(schema, "CREATE TABLE IF NOT EXISTS "+t.Schedules+" (name "+key(200)+" NOT NULL PRIMARY KEY, spec VARCHAR(255) NOT NULL,"+
		" next_run_at "+ts+" NOT NULL, last_run_at "+ts+" NULL, last_fired_by VARCHAR(200) NOT NULL DEFAULT '', paused "+d.boolean()+" NOT NULL DEFAULT FALSE, updated_at "+ts+" NOT NULL)")
	schema = append(schema, d.OutboxTables(OutboxTopicDefault)...)
	schema = append(schema, d.tableWithIndex(DelayedTableDefault,
		d.serial()+", due_at "+ts+" NOT NULL, topic VARCHAR(255) NOT NULL, target_group VARCHAR(255) NOT NULL DEFAULT '', message_id VARCHAR(255) NOT NULL,"+
			" payload "+d.blob()+" NULL, metadata TEXT NOT NULL, created_at "+ts+" NOT NULL",
		"due_at", false)...)
	schema = append(schema, d.tableWithIndex(DeliveriesTableDefault,
		"consumer "+key(200)+" NOT NULL, message_id "+key(200)+" NOT NULL, deliveries INTEGER NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (consumer, message_id)",
		"updated_at", false)...)
	return []Migration{{Version: 1, Name: "postroom schema", Statements: schema}}
}

// exactKey is the type of a key column that compares bytes exactly.
// MySQL's default collation ignores case and trailing spaces, so its key
// columns are VARBINARY; on PostgreSQL they take the "C" collation, so
// that the stale tie-break orders message IDs by bytes as MySQL and SQLite
// do; SQLite compares bytes already.
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

// tableWithIndex creates a table and an index on one time column, both
// idempotently, so that a migration cut short (MySQL commits DDL at once)
// can run again. appendOnly tables get a BRIN index on PostgreSQL: their
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

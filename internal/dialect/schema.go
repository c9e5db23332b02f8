package dialect

import (
	"cmp"
	"errors"
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

// IndexName derives an index name from a possibly schema-qualified table.
func IndexName(table, suffix string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		table = table[i+1:]
	}
	return table + "_" + suffix
}

// MigrationStatements are the statements on the migrations table.
type MigrationStatements struct {
	// Create creates the table if it does not exist.
	Create string
	// Applied counts the rows of one version (0 or 1). Argument: version.
	Applied string
	// Record records a version as applied. Arguments: version, name, applied_at.
	Record string
}

// MigrationsTableOn is Dialect.MigrationsTable with applied_at's type.
func MigrationsTableOn(table, timestamp string) (MigrationStatements, error) {
	if err := ValidateIdentifier(table); err != nil {
		return MigrationStatements{}, err
	}
	return MigrationStatements{
		Create:  "CREATE TABLE IF NOT EXISTS " + table + " (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at " + timestamp + " NOT NULL)",
		Applied: "SELECT COUNT(*) FROM " + table + " WHERE version = ?",
		Record:  "INSERT INTO " + table + " (version, name, applied_at) VALUES (?, ?, ?)",
	}, nil
}

// Schema is a database's column types and how it indexes a time column.
type Schema struct {
	// Timestamp, Blob and Boolean are column types; Serial is an
	// auto-incremented primary key column named id.
	Timestamp, Blob, Boolean, Serial string
	// Key is the type of an n-byte key column comparing bytes exactly.
	Key func(n int) string
	// TableWithIndex creates a table and an index on one time column, both
	// idempotently (MySQL commits DDL at once: a cut-short migration runs
	// again). appendOnly tables' rows arrive in time order.
	TableWithIndex func(table, columns, indexed string, appendOnly bool) []string
}

// CreateWithIndex is Schema.TableWithIndex as two statements, the index's
// with using ("" or " USING …").
func CreateWithIndex(table, columns, indexed, using string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS " + table + " (" + columns + ")",
		"CREATE INDEX IF NOT EXISTS " + IndexName(table, indexed) + " ON " + table + using + " (" + indexed + ")",
	}
}

// Migrations is Dialect.Migrations; outbox creates the outbox's tables.
func (s Schema) Migrations(t Tables, outbox []string) []Migration {
	t = t.WithDefaults()
	ts, key := s.Timestamp, s.Key
	var schema []string
	schema = append(schema, s.TableWithIndex(t.Inbox,
		"consumer "+key(200)+" NOT NULL, source "+key(200)+" NOT NULL, message_id "+key(200)+" NOT NULL, message_type VARCHAR(255) NOT NULL, received_at "+ts+" NOT NULL,"+
			" status VARCHAR(16) NOT NULL DEFAULT '"+StatusDone+"', lease_until "+ts+" NULL, attempts INTEGER NOT NULL DEFAULT 1, checksum VARCHAR(64) NOT NULL DEFAULT '',"+
			" payload "+s.Blob+" NULL, duplicates INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (consumer, source, message_id)",
		"received_at", true)...)
	schema = append(schema, s.TableWithIndex(t.Watermarks,
		"consumer "+key(200)+" NOT NULL DEFAULT '', message_type "+key(255)+" NOT NULL, entity_id "+key(200)+" NOT NULL, version_at BIGINT NOT NULL,"+
			" message_id "+key(200)+" NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (consumer, message_type, entity_id)",
		"updated_at", false)...)
	schema = append(schema, "CREATE TABLE IF NOT EXISTS "+t.Schedules+" (name "+key(200)+" NOT NULL PRIMARY KEY, spec VARCHAR(255) NOT NULL,"+
		" next_run_at "+ts+" NOT NULL, last_run_at "+ts+" NULL, last_fired_by VARCHAR(200) NOT NULL DEFAULT '', paused "+s.Boolean+" NOT NULL DEFAULT FALSE, updated_at "+ts+" NOT NULL)")
	schema = append(schema, outbox...)
	schema = append(schema, s.TableWithIndex(DelayedTableDefault,
		s.Serial+", due_at "+ts+" NOT NULL, topic VARCHAR(255) NOT NULL, target_group VARCHAR(255) NOT NULL DEFAULT '', message_id VARCHAR(255) NOT NULL,"+
			" payload "+s.Blob+" NULL, metadata TEXT NOT NULL, created_at "+ts+" NOT NULL",
		"due_at", false)...)
	schema = append(schema, s.TableWithIndex(DeliveriesTableDefault,
		"consumer "+key(200)+" NOT NULL, message_id "+key(200)+" NOT NULL, deliveries INTEGER NOT NULL, updated_at "+ts+" NOT NULL, PRIMARY KEY (consumer, message_id)",
		"updated_at", false)...)
	return []Migration{{Version: 1, Name: "postroom schema", Statements: schema}}
}

// Package sqlite is postroom's dialect of SQLite. SQLite has one writer
// at a time: nothing is locked for update, and a read sees the row as it
// is now. watermill-sql has no adapter for it: no outbox, no SQL
// transport.
package sqlite

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	gormsqlite "github.com/glebarez/sqlite"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/sqlitedriver"
)

// Dialect is SQLite.
type Dialect struct{ dialect.Shared }

var _ dialect.Dialect = Dialect{}

// skip makes an insert affect no row on a duplicate key, without failing.
const skip = " ON CONFLICT DO NOTHING"

func (Dialect) String() string                  { return "sqlite" }
func (Dialect) Dialector(name string) bool      { return name == "sqlite" || name == "sqlite3" }
func (Dialect) Native(query string) string      { return query }
func (Dialect) Time(t time.Time) any            { return dialect.Micro(t).Format(dialect.TimeText) }
func (Dialect) InboxInsert(table string) string { return dialect.InsertKeys(table, 1) + skip }
func (Dialect) InboxInsertMany(table string, n int) string {
	return dialect.InsertKeys(table, n) + skip
}
func (Dialect) InboxInsertLogged(table string) string { return dialect.InsertLogged(table) + skip }
func (Dialect) ClaimInsert(table string) string       { return dialect.InsertClaim(table) + skip }
func (d Dialect) ClaimReadLocked(table string) string { return d.ClaimRead(table) }
func (Dialect) WatermarkRead(table string) string     { return dialect.WatermarkSelect(table) }

func (Dialect) WatermarkUpsert(table string) string {
	return dialect.WatermarkInsert(table) + " ON CONFLICT (consumer, message_type, entity_id) DO UPDATE SET" +
		" version_at = excluded.version_at, message_id = excluded.message_id, updated_at = excluded.updated_at" +
		" WHERE " + table + ".version_at < excluded.version_at" +
		" OR (" + table + ".version_at = excluded.version_at AND " + table + ".message_id < excluded.message_id)"
}

func (Dialect) InboxActivity(table string) (string, error) {
	return dialect.ActivityOn(table, "CAST(strftime('%s', received_at) AS INTEGER) / ?")
}

func (Dialect) Delayed(table string) (dialect.DelayedStatements, error) {
	return dialect.DelayedOn(table, "")
}

func (Dialect) Deliveries(table string) (dialect.DeliveriesStatements, error) {
	return dialect.DeliveriesOn(table, " ON CONFLICT (consumer, message_id) DO UPDATE SET deliveries = "+table+".deliveries + 1, updated_at = excluded.updated_at")
}

func (Dialect) Schedules(table string) (dialect.ScheduleStatements, error) {
	return dialect.SchedulesOn(table, skip, "")
}

// Cleanup deletes a batch by rowid.
func (d Dialect) Cleanup(t dialect.Tables, outboxTopic string) (dialect.CleanupStatements, error) {
	return dialect.CleanupOn(d, t, outboxTopic, func(table, where string) string {
		return "DELETE FROM " + table + " WHERE rowid IN (SELECT rowid FROM " + table + " WHERE " + where + " LIMIT ?)"
	}, nil)
}

// Stats: SQLite keeps no estimate.
func (Dialect) Stats(t dialect.Tables) ([]dialect.StatsQueries, error) {
	return dialect.StatsOn(t, nil, false)
}

// schema keeps times as text (TimeText); text compares bytes already.
var schema = dialect.Schema{
	Timestamp: "TEXT", Blob: "BLOB", Boolean: "BOOLEAN", Serial: "id INTEGER PRIMARY KEY AUTOINCREMENT",
	Key: func(n int) string { return fmt.Sprintf("VARCHAR(%d)", n) },
	TableWithIndex: func(table, columns, indexed string, _ bool) []string {
		return dialect.CreateWithIndex(table, columns, indexed, "")
	},
}

func (Dialect) MigrationsTable(table string) (dialect.MigrationStatements, error) {
	return dialect.MigrationsTableOn(table, schema.Timestamp)
}

func (Dialect) Migrations(t dialect.Tables) []dialect.Migration { return schema.Migrations(t, nil) }
func (Dialect) MigrationLock() (lock, unlock string)            { return "", "" }
func (Dialect) NarrowIDTables() string                          { return "" }
func (Dialect) WidenID(string) string                           { return "" }

func (d Dialect) MessageSchema(int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	return nil, nil, fmt.Errorf("%w: watermill-sql has no %s adapter (use PostgreSQL or MySQL/MariaDB)", dialect.ErrUnsupported, d)
}

func (d Dialect) OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error) {
	schema, offsets, err := d.MessageSchema(batch)
	return schema, offsets, dialect.OutboxRelayGroup, err
}

func (d Dialect) TransportSchema(*sql.DB) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error) {
	return d.MessageSchema(1)
}

func (Dialect) OutboxTables(string) []string                    { return nil }
func (Dialect) OutboxTablesExist(string) string                 { return "" }
func (Dialect) OutboxBacklog(string) (string, []any)            { return "", nil }
func (Dialect) GroupStarts(string) dialect.GroupStart           { return dialect.GroupStart{} }
func (Dialect) GroupsBinary(string) dialect.GroupsBinaryUpgrade { return dialect.GroupsBinaryUpgrade{} }

func (d Dialect) ErrorTopic(topic string) (dialect.ErrorTopicStatements, error) {
	return dialect.ErrorTopicOn(d, topic, nil, "")
}

// BusyTimeout is store.BusyTimeout.
const BusyTimeout = 10 * time.Second

// Open opens the file, or memory, in WAL mode with a busy timeout.
func (Dialect) Open(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "sqlite:")
	if path == ":memory:" {
		path = "file::memory:"
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	// _txlock=immediate: a transaction takes the write lock at BEGIN, so two
	// processes never deadlock upgrading a read to a write.
	path += sep + fmt.Sprintf("_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)", BusyTimeout.Milliseconds())
	// Switching a new file to WAL takes its lock without SQLite's busy
	// handler: processes opening one file at once can get SQLITE_BUSY here,
	// so the open is tried again for as long as the busy timeout.
	db, err := openPool(path, cfg)
	for deadline := time.Now().Add(BusyTimeout); err != nil && strings.Contains(err.Error(), "SQLITE_BUSY") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		db, err = openPool(path, cfg)
	}
	if err != nil {
		return db, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return db, err
	}
	// One writer: a single connection serialises every transaction, so
	// concurrent handlers wait their turn instead of failing with SQLITE_BUSY.
	sqlDB.SetMaxOpenConns(1)
	return db, nil
}

// openPool opens SQLite through internal/sqlitedriver, whose
// transactions end when their COMMIT fails.
func openPool(path string, cfg *gorm.Config) (*gorm.DB, error) {
	sqlDB, err := sqlitedriver.Open(path)
	if err != nil {
		return nil, err
	}
	return dialect.OpenOn(sqlDB, gormsqlite.Dialector{DriverName: "sqlite", DSN: path, Conn: sqlDB}, cfg)
}

func (Dialect) LocalFile(dsn string) (string, bool) {
	s := strings.TrimSpace(dsn)
	for _, prefix := range []string{"sqlite://", "sqlite:", "file:"} {
		s = strings.TrimPrefix(s, prefix)
	}
	file, _, _ := strings.Cut(s, "?")
	if file == "" || strings.Contains(file, ":memory:") {
		return "", false
	}
	return file, true
}

// ClockQuery: SQLite runs in this process, on its clock.
func (Dialect) ClockQuery() string     { return "" }
func (Dialect) FoundRowsProbe() string { return "" }
func (Dialect) TimeZoneProbe() string  { return "" }
func (Dialect) ReleaseWithNext() bool  { return false }

// PoolWarning: glebarez/go-sqlite keeps SQLite's transaction open when
// COMMIT fails (a deferred foreign key, a full disk), and database/sql
// hands the connection to the next transaction, whose BEGIN then fails
// while reads see the failed transaction's writes. store.Open's pool rolls
// such a transaction back (internal/sqlitedriver).
func (Dialect) PoolWarning(db *sql.DB) string {
	if sqlitedriver.Opened(db) {
		return ""
	}
	return "this SQLite *gorm.DB was not opened by store.Open: a COMMIT that fails (a deferred foreign key, a full disk) " +
		"leaves its transaction open on the connection, the next message's BEGIN fails and reads see the failed message's writes; " +
		"open it with store.Open (\"sqlite:path\")"
}

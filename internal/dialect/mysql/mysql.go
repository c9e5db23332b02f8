// Package mysql is postroom's dialect of MySQL and MariaDB.
package mysql

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// Dialect is MySQL and MariaDB.
type Dialect struct{ dialect.Shared }

var _ dialect.Dialect = Dialect{}

// skip makes an insert affect no row on a duplicate key (without
// CLIENT_FOUND_ROWS an update to the same value counts as 0 rows).
const skip = " ON DUPLICATE KEY UPDATE message_id = message_id"

const skipLocked = " FOR UPDATE SKIP LOCKED"

func (Dialect) String() string                  { return "mysql" }
func (Dialect) Dialector(name string) bool      { return name == "mysql" }
func (Dialect) Native(query string) string      { return query }
func (Dialect) Time(t time.Time) any            { return dialect.Micro(t) }
func (Dialect) InboxInsert(table string) string { return dialect.InsertKeys(table, 1) + skip }
func (Dialect) InboxInsertMany(table string, n int) string {
	return dialect.InsertKeys(table, n) + skip
}
func (Dialect) InboxInsertLogged(table string) string { return dialect.InsertLogged(table) + skip }
func (Dialect) ClaimInsert(table string) string       { return dialect.InsertClaim(table) + skip }
func (d Dialect) ClaimReadLocked(table string) string { return d.ClaimRead(table) + " FOR UPDATE" }
func (Dialect) WatermarkRead(table string) string {
	return dialect.WatermarkSelect(table) + " FOR UPDATE"
}

// WatermarkUpsert: assignments run left to right and later ones see
// earlier results, so the condition is evaluated on the stored row by
// updated_at and message_id first; version_at is assigned last.
func (Dialect) WatermarkUpsert(table string) string {
	newer := "(version_at < VALUES(version_at) OR (version_at = VALUES(version_at) AND message_id < VALUES(message_id)))"
	return dialect.WatermarkInsert(table) + " ON DUPLICATE KEY UPDATE" +
		" updated_at = IF(" + newer + ", VALUES(updated_at), updated_at)," +
		" message_id = IF(" + newer + ", VALUES(message_id), message_id)," +
		" version_at = IF(version_at < VALUES(version_at), VALUES(version_at), version_at)"
}

func (Dialect) InboxActivity(table string) (string, error) {
	return dialect.ActivityOn(table, "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', received_at) DIV ?")
}

func (Dialect) Delayed(table string) (dialect.DelayedStatements, error) {
	return dialect.DelayedOn(table, skipLocked)
}

func (Dialect) Deliveries(table string) (dialect.DeliveriesStatements, error) {
	return dialect.DeliveriesOn(table, " ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, updated_at = VALUES(updated_at)")
}

func (Dialect) Schedules(table string) (dialect.ScheduleStatements, error) {
	return dialect.SchedulesOn(table, " ON DUPLICATE KEY UPDATE name = name", skipLocked)
}

// Cleanup deletes a batch with DELETE … LIMIT; an outbox row is relayed
// when it is acked (OutboxSchema).
func (d Dialect) Cleanup(t dialect.Tables, outboxTopic string) (dialect.CleanupStatements, error) {
	return dialect.CleanupOn(d, t, outboxTopic, func(table, where string) string {
		return "DELETE FROM " + table + " WHERE " + where + " LIMIT ?"
	}, func(topic string) (string, string) {
		table, _ := messageTables(topic)
		return table, "created_at < CURRENT_TIMESTAMP - INTERVAL ? SECOND AND `acked`"
	})
}

// Stats: the estimate of information_schema.
func (Dialect) Stats(t dialect.Tables) ([]dialect.StatsQueries, error) {
	return dialect.StatsOn(t, func(table string) (string, []any) {
		if schema, name, ok := strings.Cut(table, "."); ok {
			return "SELECT COALESCE(MAX(TABLE_ROWS), -1) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", []any{schema, name}
		}
		return "SELECT COALESCE(MAX(TABLE_ROWS), -1) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", []any{table}
	}, false)
}

// schema's key columns are VARBINARY: the default collation ignores case
// and trailing spaces.
var schema = dialect.Schema{
	Timestamp: "DATETIME(6)", Blob: "LONGBLOB", Boolean: "TINYINT(1)", Serial: "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
	Key: func(n int) string { return "VARBINARY(" + strconv.Itoa(n) + ")" },
	TableWithIndex: func(table, columns, indexed string, _ bool) []string {
		return []string{"CREATE TABLE IF NOT EXISTS " + table + " (" + columns + ", INDEX " + dialect.IndexName(table, indexed) + " (" + indexed + "))"}
	},
}

func (Dialect) MigrationsTable(table string) (dialect.MigrationStatements, error) {
	return dialect.MigrationsTableOn(table, schema.Timestamp)
}

func (d Dialect) Migrations(t dialect.Tables) []dialect.Migration {
	return schema.Migrations(t, d.OutboxTables(dialect.OutboxTopicDefault))
}

func (Dialect) MigrationLock() (lock, unlock string) {
	return "SELECT GET_LOCK('postroom_migrate', 60)", "SELECT RELEASE_LOCK('postroom_migrate')"
}

// ClockQuery reads UTC_TIMESTAMP, no zone conversion: UNIX_TIMESTAMP(NOW())
// is an hour off in the repeated hour of a named session zone.
func (Dialect) ClockQuery() string {
	return "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
}

// FoundRowsProbe updates a row of the migrations table to its own value.
func (Dialect) FoundRowsProbe() string {
	return "UPDATE " + dialect.MigrationsTableDefault + " SET version = version LIMIT 1"
}

// TimeZoneProbe compares the bound times with the same times as text.
func (Dialect) TimeZoneProbe() string {
	return "SELECT CAST(? AS DATETIME(6)) = CAST('2000-01-01 00:00:00' AS DATETIME(6)) AND " +
		"CAST(? AS DATETIME(6)) = CAST('2000-07-01 00:00:00' AS DATETIME(6))"
}

// Open refuses a DSN checkDSN refuses, and has the driver parse times.
func (Dialect) Open(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	dsn = parseTime(strings.TrimPrefix(dsn, "mysql://"))
	if err := checkDSN(dsn); err != nil {
		return nil, err
	}
	return gorm.Open(gormmysql.Open(dsn), cfg)
}

// ErrFoundRows is store.ErrFoundRows.
var ErrFoundRows = errors.New("the MySQL connection counts found rows (clientFoundRows=true, CLIENT_FOUND_ROWS): " +
	"postroom tells a duplicate from a new message by the rows an insert changed, which that makes the same; remove the option")

// ErrTimeZone is store.ErrTimeZone.
var ErrTimeZone = errors.New("the MySQL connection converts times to a zone other than UTC (the DSN's loc): " +
	"postroom keeps its times in UTC in DATETIME columns, so they would shift by the zone's offset; remove loc or set loc=UTC")

// checkDSN refuses a DSN (without mysql://) that sets clientFoundRows or a
// loc other than UTC.
func checkDSN(dsn string) error {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		if strings.Contains(err.Error(), "default addr for network") {
			// user@127.0.0.1:3306/db: the driver's error names no fix.
			return fmt.Errorf("%w: the MySQL address needs its protocol, as in user@tcp(host:3306)/db: use %s", dialect.ErrBadDSN, dialect.DSNForms)
		}
		return nil // the driver says what is wrong when it opens
	}
	if cfg.ClientFoundRows {
		return fmt.Errorf("store: %w", ErrFoundRows)
	}
	if cfg.Loc != time.UTC {
		return fmt.Errorf("store: %w (the DSN sets loc=%s)", ErrTimeZone, cfg.Loc)
	}
	return nil
}

func parseTime(dsn string) string {
	if strings.Contains(dsn, "parseTime=") {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&parseTime=true"
	}
	return dsn + "?parseTime=true"
}

func (Dialect) LocalFile(string) (string, bool) { return "", false }

func (Dialect) PoolWarning(*sql.DB) string { return "" }
func (Dialect) ReleaseWithNext() bool      { return false }

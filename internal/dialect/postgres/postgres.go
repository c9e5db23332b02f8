// Package postgres is postroom's dialect of PostgreSQL.
package postgres

import (
	"database/sql"
	"strconv"
	"strings"
	"time"

	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/pgdriver"
)

// Dialect is PostgreSQL.
type Dialect struct{ dialect.Shared }

var _ dialect.Dialect = Dialect{}

// skip makes an insert affect no row on a duplicate key, without failing:
// the transaction survives it.
const skip = " ON CONFLICT DO NOTHING"

const skipLocked = " FOR UPDATE SKIP LOCKED"

func (Dialect) String() string                  { return "postgres" }
func (Dialect) Dialector(name string) bool      { return name == "postgres" || name == "pgx" }
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

func (Dialect) WatermarkUpsert(table string) string {
	return dialect.WatermarkInsert(table) + " ON CONFLICT (consumer, message_type, entity_id) DO UPDATE SET" +
		" version_at = excluded.version_at, message_id = excluded.message_id, updated_at = excluded.updated_at" +
		" WHERE " + table + ".version_at < excluded.version_at" +
		" OR (" + table + ".version_at = excluded.version_at AND " + table + ".message_id < excluded.message_id)"
}

// Native numbers the placeholders $1, $2, ….
func (Dialect) Native(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (Dialect) InboxActivity(table string) (string, error) {
	return dialect.ActivityOn(table, "CAST(FLOOR(EXTRACT(EPOCH FROM received_at)) AS BIGINT) / ?")
}

func (Dialect) Delayed(table string) (dialect.DelayedStatements, error) {
	return dialect.DelayedOn(table, skipLocked)
}

func (Dialect) Deliveries(table string) (dialect.DeliveriesStatements, error) {
	return dialect.DeliveriesOn(table, " ON CONFLICT (consumer, message_id) DO UPDATE SET deliveries = "+table+".deliveries + 1, updated_at = excluded.updated_at")
}

func (Dialect) Schedules(table string) (dialect.ScheduleStatements, error) {
	return dialect.SchedulesOn(table, skip, skipLocked)
}

// Cleanup deletes a batch by ctid; an outbox row is relayed when it is at
// or below the relay's acked offset, in transaction order.
func (d Dialect) Cleanup(t dialect.Tables, outboxTopic string) (dialect.CleanupStatements, error) {
	return dialect.CleanupOn(d, t, outboxTopic, func(table, where string) string {
		return "DELETE FROM " + table + " WHERE ctid IN (SELECT ctid FROM " + table + " WHERE " + where + " LIMIT ?)"
	}, func(topic string) (string, string) {
		table, acked := messageTables(topic)
		return table, `created_at < LOCALTIMESTAMP - ? * INTERVAL '1 second'` +
			` AND (transaction_id, "offset") <= (SELECT last_processed_transaction_id, offset_acked FROM ` + acked +
			` WHERE consumer_group = '` + dialect.OutboxRelayGroup + `')`
	})
}

// Stats: the planner's estimate; the inbox's time index is BRIN (see schema).
func (Dialect) Stats(t dialect.Tables) ([]dialect.StatsQueries, error) {
	return dialect.StatsOn(t, func(table string) (string, []any) {
		return "SELECT COALESCE(MAX(reltuples), -1)::BIGINT FROM pg_class WHERE oid = to_regclass(?)", []any{table}
	}, true)
}

// schema's key columns take the "C" collation, so that the stale tie-break
// orders message IDs by bytes as the other stores do. Append-only tables
// get a BRIN index: their rows arrive in time order, so a tiny index finds
// the old pages.
var schema = dialect.Schema{
	Timestamp: "TIMESTAMPTZ", Blob: "BYTEA", Boolean: "BOOLEAN", Serial: "id BIGSERIAL PRIMARY KEY",
	Key: func(n int) string { return "VARCHAR(" + strconv.Itoa(n) + ") COLLATE \"C\"" },
	TableWithIndex: func(table, columns, indexed string, appendOnly bool) []string {
		if appendOnly {
			return dialect.CreateWithIndex(table, columns, indexed, " USING BRIN")
		}
		return dialect.CreateWithIndex(table, columns, indexed, "")
	},
}

func (Dialect) MigrationsTable(table string) (dialect.MigrationStatements, error) {
	return dialect.MigrationsTableOn(table, schema.Timestamp)
}

func (d Dialect) Migrations(t dialect.Tables) []dialect.Migration {
	return schema.Migrations(t, d.OutboxTables(dialect.OutboxTopicDefault))
}

func (Dialect) MigrationLock() (lock, unlock string) {
	return "SELECT pg_advisory_lock(7436180)", "SELECT pg_advisory_unlock(7436180)"
}

func (Dialect) ClockQuery() string {
	return "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
}

// Open opens PostgreSQL through pgx's driver whose transactions send BEGIN
// with their first statement (internal/pgdriver): one round trip less per
// transaction.
func (Dialect) Open(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	sqlDB, err := pgdriver.Open(dsn)
	if err != nil {
		return nil, err
	}
	return dialect.OpenOn(sqlDB, gormpg.New(gormpg.Config{Conn: sqlDB}), cfg)
}

func (Dialect) LocalFile(string) (string, bool) { return "", false }

func (Dialect) FoundRowsProbe() string     { return "" }
func (Dialect) TimeZoneProbe() string      { return "" }
func (Dialect) PoolWarning(*sql.DB) string { return "" }
func (Dialect) ReleaseWithNext() bool      { return true }

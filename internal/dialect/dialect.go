package dialect

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"gorm.io/gorm"
)

// Dialect is a database postroom speaks: every statement it runs there
// (with ? placeholders), and what else differs. A driver embeds [Shared]
// for the statements alike everywhere.
type Dialect interface {
	// String names the database ("postgres", "mysql", "sqlite").
	String() string
	// Dialector reports whether gorm's dialector named name talks to it.
	Dialector(name string) bool

	// Open opens a pool on dsn, a DSN of this database, with cfg.
	Open(dsn string, cfg *gorm.Config) (*gorm.DB, error)
	// LocalFile returns the file dsn names; false for a server or memory.
	LocalFile(dsn string) (path string, ok bool)

	// Native rewrites ? placeholders into the driver's own, for statements
	// run without gorm (no statement holds a literal question mark).
	Native(query string) string
	// Time returns t to bind for a timestamp column: UTC, microsecond
	// precision; fixed-width text (TimeText) where there is no time type.
	Time(t time.Time) any
	// ParseTime turns a scanned timestamp column back into a time.Time.
	ParseTime(v any) (time.Time, error)

	// InboxInsert claims an inbox key: one row affected when new, none for
	// a duplicate, never an error (a PostgreSQL transaction must not
	// abort). Arguments: consumer, source, message_id, message_type,
	// received_at.
	InboxInsert(table string) string
	// InboxInsertMany is InboxInsert for n keys: one row affected per new
	// key. Arguments: InboxInsert's, key after key.
	InboxInsertMany(table string, n int) string
	// InboxInsertLogged is InboxInsert also storing checksum and payload
	// (possibly NULL), its last two arguments.
	InboxInsertLogged(table string) string
	// InboxCountDuplicate adds one to a key's duplicates (consumer, source, message_id).
	InboxCountDuplicate(table string) string
	// InboxCountDone is InboxCountDuplicate for a key that is done only:
	// no row affected for an unsettled claim. Same arguments.
	InboxCountDone(table string) string
	// InboxActivity returns the console's keys done per consumer and time
	// bucket since a time. Arguments: bucket width in seconds, the time.
	// Columns: consumer, bucket (Unix seconds / width, floored), n.
	InboxActivity(table string) (string, error)

	// ClaimInsert claims a new key as processing, attempt 1; no row
	// affected when the key exists. Arguments: consumer, source,
	// message_id, message_type, received_at, lease_until, checksum, payload.
	ClaimInsert(table string) string
	// ClaimRead reads a key's claim. Arguments: consumer, source, message_id.
	ClaimRead(table string) string
	// ClaimReadLocked is ClaimRead with the row locked where the store can,
	// so MySQL reads the row as it is now, not the snapshot's.
	ClaimReadLocked(table string) string
	// ClaimTakeover takes a claim over as the next attempt if still in the
	// status and attempt read, restarting retention (received_at). Arguments:
	// lease_until, received_at, consumer, source, message_id, status, attempts.
	ClaimTakeover(table string) string
	// ClaimTakeReleased marks a released key done as the next attempt.
	// Arguments: received_at, consumer, source, message_id.
	ClaimTakeReleased(table string) string
	// ClaimMove moves a claim of one attempt to a new status, if it is in
	// one of two statuses (pass one twice for one). Arguments: status,
	// lease_until, consumer, source, message_id, attempts, from, from.
	ClaimMove(table string) string
	// ClaimResolve sets an unresolved claim done or released; retention
	// restarts (received_at) so the replay that follows finds the key.
	// Arguments: status, now, consumer, source, message_id, now.
	ClaimResolve(table string) string
	// ClaimResolveAttempt is ClaimResolve for the attempt the operator saw
	// only. Arguments: ClaimResolve's, attempts.
	ClaimResolveAttempt(table string) string
	// ClaimsUnresolved lists unresolved claims, oldest first (now, limit).
	ClaimsUnresolved(table string) string

	// WatermarkRead reads a watermark after WatermarkUpsert, locking where
	// the store can so MySQL reads the upserted row, not its snapshot.
	// Arguments: consumer, message_type, entity_id. Columns: version_at,
	// message_id.
	WatermarkRead(table string) string
	// WatermarkUpsert affects at least one row when the incoming version is
	// newer, none otherwise; of equal versions the greater message ID (as
	// bytes) wins, so every order of arrival converges. Arguments:
	// consumer, message_type, entity_id, version_at, message_id, updated_at.
	WatermarkUpsert(table string) string

	// Delayed validates table and returns the delayed messages' statements.
	Delayed(table string) (DelayedStatements, error)
	// Deliveries returns the statements of the deliveries table.
	Deliveries(table string) (DeliveriesStatements, error)
	// Schedules validates table and returns the statements on it.
	Schedules(table string) (ScheduleStatements, error)
	// Cleanup validates the names and outboxTopic ("": no outbox).
	Cleanup(t Tables, outboxTopic string) (CleanupStatements, error)
	// Stats validates and describes the inbox and watermarks, in order.
	Stats(t Tables) ([]StatsQueries, error)

	// MigrationsTable validates table and returns the statements on it.
	MigrationsTable(table string) (MigrationStatements, error)
	// Migrations returns the schema as versioned steps, oldest first. A
	// released step never changes: new schema goes in a new step, tested
	// by migrating up from version 1. Key columns compare bytes exactly.
	Migrations(t Tables) []Migration
	// MigrationLock takes and releases the migrations' lock; "" for SQLite.
	MigrationLock() (lock, unlock string)
	// NarrowIDTables lists the watermill_<topic> tables whose ID column is
	// narrower than MessageIDColumnLength, where the schema adapter cannot
	// widen them (MySQL); "" elsewhere. Column: the table's name.
	NarrowIDTables() string
	// WidenID widens the ID column of table, as NarrowIDTables names it.
	WidenID(table string) string

	// MessageSchema returns watermill-sql's adapters for a message table:
	// binary payloads, an ID column of MessageIDColumnLength, batch messages
	// a query. ErrUnsupported where watermill-sql has no adapter.
	MessageSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error)
	// OutboxSchema returns the outbox table's adapters and the relay's
	// consumer group ("" where the relay acks row by row).
	OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error)
	// TransportSchema returns MessageSchema(1)'s adapters, never skipping a
	// row that lands late (observing gaps through db where needed).
	TransportSchema(db *sql.DB) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error)
	// OutboxTables creates the outbox's tables for topic with the wide ID
	// column, for `postroom migrate`; none where there is no outbox.
	OutboxTables(topic string) []string
	// OutboxTablesExist fails unless the relay's tables exist (no row read).
	OutboxTablesExist(topic string) string
	// OutboxBacklog counts unpublished messages, with the oldest's age in s.
	OutboxBacklog(topic string) (string, []any)
	// GroupStarts returns topic's GroupStart; zero without watermill-sql.
	GroupStarts(topic string) GroupStart
	// GroupsBinary returns the upgrade of topic's offsets table; zero where
	// groups compare bytes already. A row two groups alike but for case
	// shared stays the first's; the other then reads the topic from its start.
	GroupsBinary(topic string) GroupsBinaryUpgrade
	// ErrorTopic returns the console's statements on topic's table.
	ErrorTopic(topic string) (ErrorTopicStatements, error)

	// ClockQuery reads the server's clock in Unix microseconds; "" in process.
	ClockQuery() string
	// FoundRowsProbe returns a statement affecting 0 rows of a migrated
	// database, 1 on a connection counting found rows; "" where none can.
	FoundRowsProbe() string
	// TimeZoneProbe returns 1 when a winter and a summer time argument are
	// sent as UTC; "" where the driver has no zone of its own.
	TimeZoneProbe() string
	// PoolWarning says what a pool not opened by store.Open lacks, or "".
	PoolWarning(db *sql.DB) string
	// ReleaseWithNext: a savepoint's RELEASE may go with the next statement.
	ReleaseWithNext() bool
}

// ErrUnsupported is returned for a database postroom does not speak, or
// what a database lacks (the outbox on SQLite). Each use says what is
// missing and where it exists: a fixed list would name SQLite even where
// SQLite is the one unsupported.
var ErrUnsupported = errors.New("dialect: unsupported")

// ErrBadDSN is store.ErrBadDSN: a DSN naming no supported database.
var ErrBadDSN = errors.New("store: bad DSN")

// DSNForms lists the DSNs store.Open takes, for its errors.
const DSNForms = "postgres://user:pass@host:5432/db (or postgresql://…, or host=… dbname=…), " +
	"mysql://user:pass@tcp(host:3306)/db (or user:pass@tcp(host:3306)/db), " +
	"sqlite:path, sqlite://path, file:path, :memory:, or a path ending in .db, .sqlite or .sqlite3"

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// ErrBadIdentifier is returned for a table name that is not a plain SQL identifier.
var ErrBadIdentifier = errors.New("dialect: bad table name")

// ValidateIdentifier reports whether name can be a table name: letters,
// digits and underscores, no leading digit, at most 63 characters,
// optionally "schema.table". Names are never quoted, so nothing else goes.
func ValidateIdentifier(name string) error {
	if !identifier.MatchString(name) {
		return fmt.Errorf("%w %q: use letters, digits and underscores only (optionally schema.table), at most 63 characters each", ErrBadIdentifier, name)
	}
	return nil
}

// ExactText reports whether every store keeps s byte for byte: valid UTF-8
// without NUL (PostgreSQL refuses it). Keys, entity and message IDs are
// refused otherwise.
func ExactText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// OpenOn opens gorm with dialector on sqlDB, closing sqlDB if that fails.
func OpenOn(sqlDB *sql.DB, dialector gorm.Dialector, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gorm.Open(dialector, cfg)
	if err != nil {
		_ = sqlDB.Close()
	}
	return db, err
}

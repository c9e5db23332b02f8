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

// Dialect is a database postroom speaks: every statement postroom runs on
// it, and what else differs between databases. Each database implements
// it in a package of its own (internal/dialect/postgres, mysql, sqlite);
// internal/dialects finds a *gorm.DB's. Statements alike on every
// database come from [Shared], which a driver embeds. Statements are
// written with ? placeholders (see Native).
type Dialect interface {
	// String names the database ("postgres", "mysql", "sqlite").
	String() string
	// Dialector reports whether gorm's dialector of that name (its Name)
	// talks to this database.
	Dialector(name string) bool

	// Open opens a pool on dsn, a DSN of this database, with cfg.
	Open(dsn string, cfg *gorm.Config) (*gorm.DB, error)
	// LocalFile returns the file a DSN of this database names, and false
	// for a server's or an in-memory database.
	LocalFile(dsn string) (path string, ok bool)

	// Native rewrites a query written with ? placeholders into the
	// driver's own ($1, $2, … on PostgreSQL), for statements run without
	// gorm. postroom's statements never contain a literal question mark.
	Native(query string) string
	// Time returns t as the argument to bind for a timestamp column: UTC
	// with microsecond precision on every database, fixed-width text
	// (TimeText) where there is no time type.
	Time(t time.Time) any
	// ParseTime turns a scanned timestamp column back into a time.Time.
	ParseTime(v any) (time.Time, error)

	// InboxInsert returns the statement that claims an inbox key. It
	// affects one row when the key is new and none when it is a
	// duplicate; it never fails on a duplicate, so a PostgreSQL
	// transaction is not aborted by it. Arguments: consumer, source,
	// message_id, message_type, received_at.
	InboxInsert(table string) string
	// InboxInsertMany is InboxInsert for n keys in one statement: it
	// affects one row per new key. Arguments: InboxInsert's, key after key.
	InboxInsertMany(table string, n int) string
	// InboxInsertLogged is InboxInsert that also stores the payload's
	// checksum and, possibly NULL, the payload. Arguments: consumer,
	// source, message_id, message_type, received_at, checksum, payload.
	InboxInsertLogged(table string) string
	// InboxCountDuplicate adds one to a key's count of duplicates skipped.
	// Arguments: consumer, source, message_id.
	InboxCountDuplicate(table string) string
	// InboxCountDone adds one to the duplicates of a key that is done; it
	// affects no row for a key of an unsettled claim.
	// Arguments: consumer, source, message_id.
	InboxCountDone(table string) string
	// InboxActivity returns the query of the web console's "handled"
	// charts: the keys done per consumer and time bucket received since a
	// time. Arguments: the bucket width in seconds, the time. It returns
	// consumer, bucket (seconds since 1970 divided by the width, rounded
	// down) and n. The filter on received_at uses the inbox's index for
	// cleanup.
	InboxActivity(table string) (string, error)

	// ClaimInsert claims a new key as processing, attempt 1. It affects no
	// row when the key exists. Arguments: consumer, source, message_id,
	// message_type, received_at, lease_until, checksum, payload.
	ClaimInsert(table string) string
	// ClaimRead reads the claim of a key.
	// Arguments: consumer, source, message_id.
	ClaimRead(table string) string
	// ClaimReadLocked is ClaimRead with the row locked, where the store
	// can: MySQL then reads the row as it is now, not as the
	// transaction's snapshot saw it. Arguments: consumer, source,
	// message_id.
	ClaimReadLocked(table string) string
	// ClaimTakeover takes a claim over as the next attempt, if it is still
	// in the status and attempt it was read in. The key's retention starts
	// again at the takeover (received_at), as the copy that took over may
	// itself be delivered again. Arguments: lease_until, received_at,
	// consumer, source, message_id, status, attempts.
	ClaimTakeover(table string) string
	// ClaimTakeReleased marks a released key done as the next attempt,
	// for the plain inbox of a handler that ran with external effects
	// before. Arguments: received_at, consumer, source, message_id.
	ClaimTakeReleased(table string) string
	// ClaimMove moves a claim of one attempt to a new status, if it is in
	// one of two statuses (pass one twice for one). Arguments: status,
	// lease_until, consumer, source, message_id, attempts, from, from.
	ClaimMove(table string) string
	// ClaimResolve sets the status of an unresolved claim (done or
	// released). The key's retention starts again at the resolution
	// (received_at), so the replay that follows it finds the key.
	// Arguments: status, now, consumer, source, message_id, now.
	ClaimResolve(table string) string
	// ClaimResolveAttempt is ClaimResolve for the claim of one attempt
	// only: the one the operator saw. Arguments: status, now, consumer,
	// source, message_id, now, attempts.
	ClaimResolveAttempt(table string) string
	// ClaimsUnresolved lists the unresolved claims, oldest first.
	// Arguments: now, limit.
	ClaimsUnresolved(table string) string

	// WatermarkRead returns the read of one stale-update watermark, for a
	// transaction whose WatermarkUpsert found it newer: locking where the
	// store can, so that it reads the row the upsert locked, not a
	// snapshot taken before another instance wrote it (MySQL's REPEATABLE
	// READ). Arguments: consumer, message_type, entity_id. Columns:
	// version_at, message_id.
	WatermarkRead(table string) string
	// WatermarkUpsert returns the conditional upsert of a stale-update
	// watermark. It affects at least one row when the incoming version is
	// newer than the stored one (ties broken by message ID) and none
	// otherwise. A watermark belongs to one consumer, like an inbox key:
	// two handlers of one message type each keep their own. Equal
	// versions are ordered by message ID, compared as bytes on every store
	// (the greater wins), so every order of arrival converges on the same
	// row. Arguments: consumer, message_type, entity_id, version_at,
	// message_id, updated_at.
	WatermarkUpsert(table string) string

	// Delayed returns the statements on the delayed-messages table, after
	// checking its name.
	Delayed(table string) (DelayedStatements, error)
	// Deliveries returns the statements of the deliveries table.
	Deliveries(table string) (DeliveriesStatements, error)
	// Schedules validates table and returns the statements on it.
	Schedules(table string) (ScheduleStatements, error)
	// Cleanup validates the table names and the outbox topic ("": no
	// outbox) and returns the statements of cleanup.
	Cleanup(t Tables, outboxTopic string) (CleanupStatements, error)
	// Stats validates the names of the inbox and watermark tables and
	// returns the queries that describe them, inbox first.
	Stats(t Tables) ([]StatsQueries, error)

	// MigrationsTable validates table and returns the statements on it.
	MigrationsTable(table string) (MigrationStatements, error)
	// Migrations returns postroom's schema as versioned steps, oldest
	// first. Version 1 creates every table in its present form. A step,
	// once released, never changes: new schema goes in a new step
	// (version 2 on), and is tested by migrating a database up from
	// version 1. Key columns compare bytes exactly: the inbox keys, the
	// watermarks, the schedules' names and the redelivery counts.
	Migrations(t Tables) []Migration
	// MigrationLock returns the statements that take and release a lock
	// that serialises concurrent migrations, or empty strings where the
	// database needs none (SQLite has a single writer).
	MigrationLock() (lock, unlock string)
	// NarrowIDTables returns the query that lists watermill-sql's message
	// tables (watermill_<topic>) whose ID column is narrower than
	// MessageIDColumnLength, where the schema adapter does not widen them
	// (MySQL has no conditional DDL); "" elsewhere. Column: the table's
	// name.
	NarrowIDTables() string
	// WidenID returns the statement that widens the ID column of the
	// message table named table (unquoted; one NarrowIDTables listed).
	WidenID(table string) string

	// MessageSchema returns watermill-sql's schema and offsets adapters
	// for a message table: binary payloads (the marshaler is pluggable,
	// and a malformed payload must still reach the handler and so the
	// error topic), a message ID column of MessageIDColumnLength, and
	// batch messages a query (1 when a crash must not lose a fetched
	// batch's acks). ErrUnsupported where watermill-sql has no adapter.
	MessageSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error)
	// OutboxSchema returns watermill-sql's schema and offsets adapters for
	// the outbox's table, and the relay's consumer group ("" where the
	// relay acks row by row).
	OutboxSchema(batch int) (wsql.SchemaAdapter, wsql.OffsetsAdapter, string, error)
	// TransportSchema returns the schema and offsets adapters of the SQL
	// transport's topics: MessageSchema's, one message a query, with reads
	// that never skip a row that lands late (observing gaps through db
	// where that takes a second look).
	TransportSchema(db *sql.DB) (wsql.SchemaAdapter, wsql.OffsetsAdapter, error)
	// OutboxTables returns the statements that create the outbox's tables
	// for topic (the messages and the relay's offsets), as watermill-sql
	// would but with the wide ID column: `postroom migrate` applies them,
	// so a bus with an outbox needs no DDL rights at run time. None where
	// there is no outbox.
	OutboxTables(topic string) []string
	// OutboxTablesExist returns a query that fails unless the outbox's
	// tables for topic that its relay reads exist (it reads no row).
	OutboxTablesExist(topic string) string
	// OutboxBacklog returns the query of the messages the relay has not
	// published yet, with its arguments: their count and the age in
	// seconds of the oldest.
	OutboxBacklog(topic string) (string, []any)
	// GroupStarts returns the statements of GroupStart for topic; the zero
	// GroupStart without watermill-sql tables.
	GroupStarts(topic string) GroupStart
	// GroupsBinary returns the upgrade of topic's offsets table; the zero
	// value where groups compare bytes already. A row two groups alike but
	// for case shared until then stays the first's; a running subscription
	// of the other then reads the topic from its first message (what it
	// missed, and what it handled, which its inbox absorbs), and one
	// started afterwards starts as a new group does.
	GroupsBinary(topic string) GroupsBinaryUpgrade
	// ErrorTopic returns the statements on the message table of topic, on
	// the databases of the SQL transport.
	ErrorTopic(topic string) (ErrorTopicStatements, error)

	// ClockQuery returns the query of the server's clock in microseconds
	// since 1970, UTC; "" for a database in this process, on its clock.
	ClockQuery() string
	// FoundRowsProbe returns the statement that changes 0 rows of a
	// migrated database on a right connection and finds 1 on a connection
	// that counts found rows; "" where no connection can count so.
	FoundRowsProbe() string
	// TimeZoneProbe returns the query that returns 1 when the connection
	// sends its times' arguments (a winter and a summer time, in UTC) as
	// UTC; "" where the driver has no zone of its own.
	TimeZoneProbe() string
	// PoolWarning returns what a pool not opened by store.Open lacks on
	// this database, "" for nothing.
	PoolWarning(db *sql.DB) string
	// ReleaseWithNext reports whether a savepoint's RELEASE may wait for
	// the connection's next statement (internal/pgdriver sends them in one
	// round trip).
	ReleaseWithNext() bool
}

// ErrUnsupported is returned for a database whose dialect postroom does not
// speak, or for what a database lacks (the outbox on SQLite).
// Its message says only that; each use says what is missing, and on
// which databases it exists: a fixed list of the supported databases
// would name SQLite even where SQLite is the one unsupported.
var ErrUnsupported = errors.New("dialect: unsupported")

// ErrBadDSN is returned for a DSN that names no supported database
// (store.ErrBadDSN).
var ErrBadDSN = errors.New("store: bad DSN")

// DSNForms lists the DSNs store.Open takes, for its errors.
const DSNForms = "postgres://user:pass@host:5432/db (or postgresql://…, or host=… dbname=…), " +
	"mysql://user:pass@tcp(host:3306)/db (or user:pass@tcp(host:3306)/db), " +
	"sqlite:path, sqlite://path, file:path, :memory:, or a path ending in .db, .sqlite or .sqlite3"

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// ErrBadIdentifier is returned for a table name that is not a plain SQL identifier.
var ErrBadIdentifier = errors.New("dialect: bad table name")

// ValidateIdentifier reports whether name can be used as a table name: letters,
// digits and underscores, not starting with a digit, at most 63 characters,
// optionally qualified by one schema ("schema.table"). Names are never quoted
// or escaped, so anything else is refused.
func ValidateIdentifier(name string) error {
	if !identifier.MatchString(name) {
		return fmt.Errorf("%w %q: use letters, digits and underscores only (optionally schema.table), at most 63 characters each", ErrBadIdentifier, name)
	}
	return nil
}

// ExactText reports whether every store keeps s byte for byte: valid UTF-8
// without NUL (PostgreSQL refuses NUL in text). Keys, entity IDs and
// message IDs are refused otherwise, on every store alike.
func ExactText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// OpenOn opens gorm with dialector on the pool sqlDB of postroom's own
// driver, closing the pool if that fails.
func OpenOn(sqlDB *sql.DB, dialector gorm.Dialector, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gorm.Open(dialector, cfg)
	if err != nil {
		_ = sqlDB.Close()
	}
	return db, err
}

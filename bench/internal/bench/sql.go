package bench

import (
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialect/postgres"
)

// pg is the dialect of the raw runs.
var pg = postgres.Dialect{}

// entities is how many entities the stale runs update, round robin.
const entities = 1000

// The business tables and the statements of the raw runs on PostgreSQL.
// The inbox and watermark statements are the dialect layer's own, so the
// raw runs execute exactly what the framework does.
var (
	createBusiness  = "CREATE TABLE business (id BIGSERIAL PRIMARY KEY, message_id VARCHAR(200) NOT NULL, amount BIGINT NOT NULL)"
	createProcessed = "CREATE TABLE processed (message_id VARCHAR(200) NOT NULL); CREATE INDEX processed_id ON processed (message_id)"
	insertBusiness  = "INSERT INTO business (message_id, amount) VALUES ($1, $2)"
	insertInbox     = pg.Native(pg.InboxInsert(dialect.InboxTableDefault))
	upsertWatermark = pg.Native(pg.WatermarkUpsert(dialect.WatermarksTableDefault))
	selectProcessed = "SELECT COUNT(*) FROM processed WHERE message_id = $1"
	insertProcessed = "INSERT INTO processed (message_id) VALUES ($1)"
	truncateAll     = "TRUNCATE business, processed, postroom_inbox, postroom_stale_watermarks"
)

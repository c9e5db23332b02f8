// Package stale drops an update that is older than one already applied to
// the same entity, whatever order the updates arrive in.
//
// # How it works
//
// Each message carries a version: the entity it is about and a timestamp
// (metadata "postroom-entity-id" and "postroom-version" by default, set by
// the bus when the sender gives them; [Config.Version] reads them from
// anywhere else). The middleware returned by [New] runs inside the unit of
// work (it opens one if there is none) and keeps one watermark row per
// (consumer, message type, entity ID), updated by a single conditional
// upsert; two handlers of one message type each keep their own:
//
//	INSERT … ON CONFLICT (consumer, message_type, entity_id) DO UPDATE …
//	WHERE stored.version_at < incoming.version_at
//	   OR (stored.version_at = incoming.version_at AND stored.message_id < incoming.message_id)
//
// No row affected means a newer (or the same) version was applied: the
// transaction rolls back, the message is acked, and the handler is not
// called. Equal timestamps are ordered by message ID, so every order of
// arrival ends in the same state. The row lock the upsert takes serialises
// concurrent updates of one entity.
//
// # MySQL connections
//
// The upsert's "no row affected" is what makes an update stale. A MySQL
// connection opened with clientFoundRows=true (CLIENT_FOUND_ROWS) counts
// the row it matched instead, so every older update would be applied. The
// bus refuses such a connection in Run and store.Open refuses such a DSN;
// used without them, call store.CheckFoundRows at startup (and
// store.CheckTimeZone, which refuses a driver's loc other than UTC).
//
// # Bad input
//
// A missing entity ID or version, an unparseable version, and a version
// further in the future than [Config.MaxSkew] are a [*VersionError], which
// the bus sends to the error topic without retrying: a bogus future version
// would otherwise block every later update of its entity.
//
// # Retention
//
// Watermarks not updated within the retention are purged by the
// CleanupStore handler. An update to such an entity that arrives later
// still is applied as if it were the first: see docs/guarantees.md.
package stale

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
// arrival ends in the same state; the upsert's row lock serialises
// concurrent updates of one entity.
//
// A MySQL connection with clientFoundRows=true counts a matched row as
// affected, so every older update would be applied: the bus and store.Open
// refuse it; otherwise call store.CheckFoundRows (and store.CheckTimeZone)
// at startup.
//
// # Bad input
//
// A missing entity ID or version, an unparseable one, or one further in the
// future than [Config.MaxSkew] (which would block every later update of
// its entity) is a [*VersionError]: the bus sends it to the error topic
// without retrying.
//
// # Retention
//
// The CleanupStore handler purges watermarks not updated within the
// retention; see docs/guarantees.md for updates that arrive later still.
package stale

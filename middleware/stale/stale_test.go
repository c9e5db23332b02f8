package stale_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"pgregory.net/rapid"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/middleware/unitofwork"
)

var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func update(id, entity string, at time.Time) *message.Message {
	msg := message.NewMessage(id, nil)
	msg.Metadata.Set(metadata.MessageType, "crm.CustomerUpdated")
	msg.Metadata.Set(metadata.EntityID, entity)
	msg.Metadata.Set(metadata.Version, at.Format(time.RFC3339Nano))
	return msg
}

// entities is the business table: the state of each entity as last written.
func entities(t *testing.T, db *gorm.DB) {
	t.Helper()
	require.NoError(t, db.Exec("CREATE TABLE entities (id VARCHAR(200) NOT NULL PRIMARY KEY, version_ns BIGINT NOT NULL, message_id VARCHAR(200) NOT NULL)").Error)
}

type state struct {
	version int64
	id      string
}

func (s state) newer(o state) bool {
	return s.version > o.version || (s.version == o.version && s.id > o.id)
}

// applyUpdate writes the entity's new state and reports, through violation,
// any update applied on top of a newer one.
func applyUpdate(violation func(string)) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		tx := unitofwork.Tx(msg.Context())
		entity := msg.Metadata.Get(metadata.EntityID)
		at, _ := time.Parse(time.RFC3339Nano, msg.Metadata.Get(metadata.Version))
		incoming := state{at.UnixNano(), msg.UUID}
		var rows []struct {
			VersionNs int64
			MessageID string
		}
		if err := tx.Raw("SELECT version_ns, message_id FROM entities WHERE id = ?", entity).Scan(&rows).Error; err != nil {
			return nil, err
		}
		if len(rows) == 1 && !incoming.newer(state{rows[0].VersionNs, rows[0].MessageID}) {
			violation(fmt.Sprintf("%s: applied %v on top of %v", entity, incoming, rows[0]))
		}
		if err := tx.Exec("DELETE FROM entities WHERE id = ?", entity).Error; err != nil {
			return nil, err
		}
		return nil, tx.Exec("INSERT INTO entities (id, version_ns, message_id) VALUES (?, ?, ?)", entity, incoming.version, incoming.id).Error
	}
}

func newStale(t require.TestingT, db *gorm.DB, rec metrics.Recorder) message.HandlerMiddleware {
	mw, err := stale.New(stale.Config{DB: db, Consumer: "addresses", Recorder: rec, Now: func() time.Time { return base.Add(time.Hour) }})
	require.NoError(t, err)
	return mw
}

// TestConvergesUnderAnyOrder is the property: random versioned updates of a
// few entities, delivered in random order, with duplicates, by 1 to 8
// concurrent consumers, end with every entity at its newest version, and no
// update is ever applied on top of a newer one.
func TestConvergesUnderAnyOrder(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			entities(t, db)
			if sqlDB, err := db.DB(); err == nil && store.Name != "sqlite" {
				sqlDB.SetMaxOpenConns(16)
			}
			round := 0
			rapid.Check(t, func(rt *rapid.T) {
				round++
				var mu sync.Mutex
				var violations []string
				h := newStale(rt, db, nil)(applyUpdate(func(v string) { mu.Lock(); violations = append(violations, v); mu.Unlock() }))

				n := rapid.IntRange(1, 12).Draw(rt, "updates")
				newest := map[string]state{}
				var deliveries []*message.Message
				for i := range n {
					entity := fmt.Sprintf("r%d-e%d", round, rapid.IntRange(0, 2).Draw(rt, "entity"))
					at := base.Add(time.Duration(rapid.IntRange(0, 4).Draw(rt, "second")) * time.Second)
					id := fmt.Sprintf("m%02d-%d", rapid.IntRange(0, 99).Draw(rt, "id"), i)
					s := state{at.UnixNano(), id}
					if s.newer(newest[entity]) {
						newest[entity] = s
					}
					for range rapid.IntRange(1, 3).Draw(rt, "copies") {
						deliveries = append(deliveries, update(id, entity, at))
					}
				}
				order := rapid.Permutation(deliveries).Draw(rt, "order")
				consumers := rapid.IntRange(1, 8).Draw(rt, "consumers")
				next := make(chan *message.Message)
				errs := make(chan error, len(order))
				var wg sync.WaitGroup
				for range consumers {
					wg.Go(func() {
						for msg := range next {
							// A failed attempt (a MariaDB deadlock between two
							// first inserts) is redelivered, as the broker does.
							var err error
							for range 20 {
								if _, err = h(msg.Copy()); err == nil {
									break
								}
							}
							if err != nil {
								errs <- err
							}
						}
					})
				}
				for _, msg := range order {
					next <- msg
				}
				close(next)
				wg.Wait()
				close(errs)
				for err := range errs {
					rt.Fatalf("handler: %v", err)
				}
				if len(violations) > 0 {
					rt.Fatalf("updates applied out of order: %v", violations)
				}
				for entity, want := range newest {
					var got struct {
						VersionNs int64
						MessageID string
					}
					require.NoError(rt, db.Raw("SELECT version_ns, message_id FROM entities WHERE id = ?", entity).Scan(&got).Error)
					if got.VersionNs != want.version || got.MessageID != want.id {
						rt.Fatalf("%s ended at %+v, want %+v", entity, got, want)
					}
				}
			})
		})
	}
}

func TestStaleUpdateIsSkippedAndCounted(t *testing.T) {
	db := testenv.SQLite(t)
	entities(t, db)
	counters := &metrics.Counters{}
	var applied []string
	h := newStale(t, db, counters)(func(msg *message.Message) ([]*message.Message, error) {
		applied = append(applied, msg.UUID)
		return nil, nil
	})
	for _, msg := range []*message.Message{
		update("b", "c-1", base.Add(2*time.Second)),
		update("a", "c-1", base.Add(1*time.Second)), // older: skipped
		update("c", "c-1", base.Add(2*time.Second)), // tie, larger ID: applied
		update("b", "c-1", base.Add(2*time.Second)), // tie, smaller ID: skipped
		update("d", "c-2", base),                    // another entity
	} {
		_, err := h(msg)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"b", "c", "d"}, applied)
	require.EqualValues(t, 2, counters.Total(metrics.Stale))
}

func TestWithInboxInOneTransaction(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			in, err := inbox.New(inbox.Config{DB: db, Consumer: "crm"})
			require.NoError(t, err)
			calls := 0
			failNext := true
			h := in(newStale(t, db, nil)(func(*message.Message) ([]*message.Message, error) {
				calls++
				if failNext {
					failNext = false
					return nil, errors.New("transient")
				}
				return nil, nil
			}))
			_, err = h(update("m2", "e", base.Add(time.Second)))
			require.Error(t, err, "first attempt fails: watermark and inbox row roll back")
			_, err = h(update("m2", "e", base.Add(time.Second)))
			require.NoError(t, err)
			_, err = h(update("m2", "e", base.Add(time.Second))) // duplicate and stale: skipped
			require.NoError(t, err)
			_, err = h(update("m1", "e", base)) // new key, stale
			require.NoError(t, err)
			require.Equal(t, 2, calls)
			var inboxRows int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&inboxRows).Error)
			require.EqualValues(t, 1, inboxRows, "a stale update's inbox row rolls back with it")
		})
	}
}

func TestBadVersionsAreUnrecoverable(t *testing.T) {
	db := testenv.SQLite(t)
	called := false
	h := newStale(t, db, nil)(func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })
	now := base.Add(time.Hour)
	noEntity := update("1", "", base)
	noVersion := update("2", "e", base)
	noVersion.Metadata.Set(metadata.Version, "")
	unparseable := update("3", "e", base)
	unparseable.Metadata.Set(metadata.Version, "yesterday")
	future := update("4", "e", now.Add(6*time.Minute))
	noType := update("5", "e", base)
	noType.Metadata.Set(metadata.MessageType, "")
	longEntity := update("6", strings.Repeat("e", 201), base)
	zero := update("8", "e", base)
	zero.Metadata.Set(metadata.Version, "0001-01-01T00:00:00Z")
	unixSeconds := update("9", "e", base)
	unixSeconds.Metadata.Set(metadata.Version, "1796536566")
	for name, msg := range map[string]*message.Message{
		"no entity": noEntity, "no version": noVersion, "unparseable": unparseable,
		"far future": future, "no type": noType, "long entity": longEntity, "zero time": zero,
		"unix seconds": unixSeconds,
	} {
		_, err := h(msg)
		require.ErrorIs(t, err, stale.ErrBadVersion, name)
		if name == "unix seconds" { // Go's own text names layout fragments: the reason shows what is wanted
			require.ErrorContains(t, err, `version "1796536566" is not an RFC 3339 timestamp such as 2026-12-06T10:04:05.123456789Z`)
		}
		if name == "zero time" { // set, so not "missing"
			require.ErrorContains(t, err, `version "0001-01-01T00:00:00Z" is out of range: years 1678 to 2261`)
		}
		if name == "long entity" { // which rule, and by how much
			require.ErrorContains(t, err, "entity ID has 201 bytes: at most 200")
		}
		if name == "no entity" { // a foreign producer learns the headers, not a Go option only
			require.ErrorContains(t, err, "set metadata postroom-entity-id and postroom-version")
		}
		var unrecoverable interface{ Unrecoverable() bool }
		require.ErrorAs(t, err, &unrecoverable, name)
	}
	require.False(t, called)
	_, err := h(update("7", "e", now.Add(4*time.Minute))) // within the skew
	require.NoError(t, err)
	require.True(t, called)
}

// TestLowerCaseTAndZAreRFC3339: RFC 3339 (section 5.6) allows "t" and "z"
// in lower case; Go's parser does not, and a foreign producer's version
// written so must not be refused as "not an RFC 3339 timestamp".
func TestLowerCaseTAndZAreRFC3339(t *testing.T) {
	for raw, want := range map[string]time.Time{
		"2026-01-02t03:04:05z":           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		"2026-01-02t03:04:05.5+02:00":    time.Date(2026, 1, 2, 1, 4, 5, 5e8, time.UTC),
		"2026-01-02T03:04:05.123456789Z": time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC),
	} {
		msg := message.NewMessage("m", nil)
		msg.Metadata.Set(metadata.EntityID, "e")
		msg.Metadata.Set(metadata.Version, raw)
		v, err := stale.MetadataVersion(msg)
		require.NoError(t, err, raw)
		require.True(t, want.Equal(v.At), "%s: %s", raw, v.At)
	}
}

// TestATieThatSkipsAnUpdateIsSaid: two updates of one entity with the same
// version (an AMQP timestamp header carries whole seconds) keep the one
// with the greater message ID, which need not be the later update; the
// skip is said at warn, at most every 10 minutes per consumer and message
// type. An older update, or the applied one again, is not a tie.
func TestATieThatSkipsAnUpdateIsSaid(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			logger, logs := testenv.CapturedLogger(slog.LevelWarn)
			now := base.Add(time.Hour)
			mw, err := stale.New(stale.Config{DB: db, Consumer: "addresses", Logger: logger, Now: func() time.Time { return now }})
			require.NoError(t, err)
			var applied []string
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				applied = append(applied, msg.UUID)
				return nil, nil
			})
			handle := func(msg *message.Message) {
				t.Helper()
				_, err := h(msg)
				require.NoError(t, err)
			}
			second := base.Add(time.Second)
			handle(update("zzzz-older", "c-1", second))
			handle(update("zzzz-older", "c-1", second)) // the applied one again
			handle(update("aaaa-older-still", "c-1", base))
			require.Empty(t, logs.String(), "neither a redelivery nor an older update is a tie")

			handle(update("aaaa-newer", "c-1", second))
			said := logs.String()
			require.Contains(t, said, "same version")
			require.Contains(t, said, "skipped_message_id=aaaa-newer")
			require.Contains(t, said, "applied_message_id=zzzz-older")

			handle(update("bbbb", "c-1", second))
			handle(update("cccc", "c-1", second))
			require.Equal(t, said, logs.String(), "said again only after 10 minutes")
			email := func(id string) *message.Message {
				msg := update(id, "c-1", second)
				msg.Metadata.Set(metadata.MessageType, "crm.CustomerEmailChanged")
				return msg
			}
			handle(email("zzzz-email"))
			handle(email("aaaa-email"))
			require.Contains(t, logs.String(), "skipped_message_id=aaaa-email", "another message type's tie is said at once")
			now = now.Add(11 * time.Minute)
			handle(update("dddd", "c-1", second))
			require.Contains(t, logs.String(), "ties_not_said_since_the_last_warning=2")
			require.Equal(t, []string{"zzzz-older", "zzzz-email"}, applied)
		})
	}
}

// TestATieIsToldInATransactionThatReadBefore on PostgreSQL and MariaDB:
// the tie is told from the watermark the upsert found, not from a snapshot
// of the transaction taken before another instance wrote it. MariaDB's
// REPEATABLE READ reads from the transaction's first read on (a batch
// member's handler before it, a check of an earlier member); without a
// locking read the watermark is not there, and the check fails the
// message.
func TestATieIsToldInATransactionThatReadBefore(t *testing.T) {
	for _, store := range testenv.Databases {
		if store.Name == "sqlite" { // one writer: no other instance writes in between
			continue
		}
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			logger, logs := testenv.CapturedLogger(slog.LevelWarn)
			mw, err := stale.New(stale.Config{DB: db, Consumer: "addresses", Logger: logger, Now: func() time.Time { return base.Add(time.Hour) }})
			require.NoError(t, err)
			var applied []string
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				applied = append(applied, msg.UUID)
				return nil, nil
			})
			second := base.Add(time.Second)
			msg := update("aaaa-newer", "c-1", second)
			msg.SetContext(context.Background())
			_, err = unitofwork.Run(db, msg, func(msg *message.Message) ([]*message.Message, error) {
				var n int64
				if err := unitofwork.Tx(msg.Context()).Raw("SELECT COUNT(*) FROM postroom_stale_watermarks").Scan(&n).Error; err != nil {
					return nil, err
				}
				other := update("zzzz-older", "c-1", second) // another instance, its own transaction
				other.SetContext(context.Background())
				if _, err := h(other); err != nil {
					return nil, err
				}
				return h(msg)
			})
			require.NoError(t, err)
			require.Equal(t, []string{"zzzz-older"}, applied)
			require.Contains(t, logs.String(), "applied_message_id=zzzz-older")
		})
	}
}

// TestWatermarksAreKeptPerMessageType on every store: one entity's
// watermark is kept per message type, so an update of another kind with an
// older version is not stale. It catches an upsert that ignores the
// message type, which no other test does.
func TestWatermarksAreKeptPerMessageType(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			counters := &metrics.Counters{}
			var applied []string
			h := newStale(t, db, counters)(func(msg *message.Message) ([]*message.Message, error) {
				applied = append(applied, msg.UUID)
				return nil, nil
			})
			address := update("m-2", "c-1", base.Add(2*time.Second))
			email := update("m-1", "c-1", base.Add(time.Second))
			email.Metadata.Set(metadata.MessageType, "crm.CustomerEmailChanged")
			for _, msg := range []*message.Message{address, email} {
				_, err := h(msg)
				require.NoError(t, err)
			}
			require.Equal(t, []string{"m-2", "m-1"}, applied)
			require.Zero(t, counters.Total(metrics.Stale))
			var rows int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_stale_watermarks WHERE entity_id = ?", "c-1").Scan(&rows).Error)
			require.EqualValues(t, 2, rows)
		})
	}
}

// TestWatermarksAreKeptPerConsumer on every store: two consumers of one
// update stream (two handlers, or two endpoints on one database) each keep
// their own watermark, so what one applied does not make the other's
// older update stale. An upsert that ignores the consumer fails here, not
// only in the bus's conformance checks.
func TestWatermarksAreKeptPerConsumer(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			var applied []string
			for _, step := range []struct {
				consumer string
				msg      *message.Message
			}{
				{"billing", update("m-2", "c-1", base.Add(2*time.Second))},
				{"shipping", update("m-1", "c-1", base.Add(time.Second))},
			} {
				mw, err := stale.New(stale.Config{DB: db, Consumer: step.consumer, Now: func() time.Time { return base.Add(time.Hour) }})
				require.NoError(t, err)
				_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
					applied = append(applied, step.consumer+"/"+msg.UUID)
					return nil, nil
				})(step.msg)
				require.NoError(t, err)
			}
			require.Equal(t, []string{"billing/m-2", "shipping/m-1"}, applied)
		})
	}
}

// TestAStaleReplayIsSaid: a message replayed from the error topic that is
// older than the update applied since is skipped, as any stale update, and
// said at info: an operator asked for it, and "replayed 1" with nothing
// run and no line leaves them guessing.
func TestAStaleReplayIsSaid(t *testing.T) {
	db := testenv.SQLite(t)
	logger, logs := testenv.CapturedLogger(slog.LevelInfo)
	mw, err := stale.New(stale.Config{DB: db, Consumer: "addresses", Logger: logger, Now: func() time.Time { return base.Add(time.Hour) }})
	require.NoError(t, err)
	h := mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, msg := range []*message.Message{update("newer", "c-1", base.Add(time.Second)), update("older", "c-1", base)} {
		_, err := h(msg)
		require.NoError(t, err)
	}
	require.Empty(t, logs.String(), "an older update that nobody replayed is a debug line")
	replayed := update("older-replayed", "c-1", base)
	replayed.Metadata.Set(metadata.Replayed, "2026-12-06T01:00:00Z")
	_, err = h(replayed)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "replayed from the error topic is older than the update applied since")
	require.Contains(t, logs.String(), "message_id=older-replayed")
}

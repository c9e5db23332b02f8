package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
)

// effects is a business table with no unique key: only the inbox can keep
// a message from writing twice.
func effects(t *testing.T, db *gorm.DB) {
	t.Helper()
	require.NoError(t, db.Exec("CREATE TABLE effects (message_id VARCHAR(200) NOT NULL)").Error)
}

func countEffects(t *testing.T, db *gorm.DB, id string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM effects WHERE message_id = ?", id).Scan(&n).Error)
	return n
}

// writeEffect is the handler under test: one business insert through the
// unit of work's transaction.
func writeEffect(msg *message.Message) ([]*message.Message, error) {
	return nil, unitofwork.Tx(msg.Context()).Exec("INSERT INTO effects (message_id) VALUES (?)", msg.UUID).Error
}

func newInbox(t *testing.T, db *gorm.DB, rec metrics.Recorder) message.HandlerMiddleware {
	t.Helper()
	mw, err := inbox.New(inbox.Config{DB: db, Consumer: "billing.invoice", Recorder: rec})
	require.NoError(t, err)
	return mw
}

func TestInboxConformance(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("a duplicate is acked without running the handler", func(t *testing.T) {
				db := store.Open(t)
				effects(t, db)
				counters := &metrics.Counters{}
				h := newInbox(t, db, counters)(writeEffect)
				for range 3 {
					_, err := h(message.NewMessage("m-1", nil))
					require.NoError(t, err)
				}
				require.EqualValues(t, 1, countEffects(t, db, "m-1"))
				require.EqualValues(t, 2, counters.Get("billing.invoice", metrics.Duplicate))
				var duplicates int
				require.NoError(t, db.Raw("SELECT duplicates FROM postroom_inbox WHERE message_id = 'm-1'").Scan(&duplicates).Error)
				require.Equal(t, 2, duplicates, "counted in the table too, for `postroom inbox stats`")
			})

			t.Run("a failed attempt leaves no trace and the redelivery is handled", func(t *testing.T) {
				db := store.Open(t)
				effects(t, db)
				var calls atomic.Int32
				h := newInbox(t, db, nil)(func(msg *message.Message) ([]*message.Message, error) {
					if _, err := writeEffect(msg); err != nil {
						return nil, err
					}
					if calls.Add(1) == 1 {
						return nil, errors.New("payment API timed out")
					}
					return nil, nil
				})
				_, err := h(message.NewMessage("m-2", nil))
				require.ErrorContains(t, err, "payment API timed out")
				require.EqualValues(t, 0, countEffects(t, db, "m-2"))
				_, err = h(message.NewMessage("m-2", nil))
				require.NoError(t, err)
				require.EqualValues(t, 1, countEffects(t, db, "m-2"))
				require.EqualValues(t, 2, calls.Load())
			})

			t.Run("a panicking attempt leaves no trace", func(t *testing.T) {
				db := store.Open(t)
				effects(t, db)
				var calls atomic.Int32
				h := newInbox(t, db, nil)(func(msg *message.Message) ([]*message.Message, error) {
					if _, err := writeEffect(msg); err != nil {
						return nil, err
					}
					if calls.Add(1) == 1 {
						panic("boom")
					}
					return nil, nil
				})
				require.Panics(t, func() { _, _ = h(message.NewMessage("m-3", nil)) })
				_, err := h(message.NewMessage("m-3", nil))
				require.NoError(t, err)
				require.EqualValues(t, 1, countEffects(t, db, "m-3"))
			})

			t.Run("concurrent deliveries of one key commit one effect", func(t *testing.T) {
				db := store.Open(t)
				effects(t, db)
				if sqlDB, err := db.DB(); err == nil && store.Name != "sqlite" {
					sqlDB.SetMaxOpenConns(32)
				}
				counters := &metrics.Counters{}
				h := newInbox(t, db, counters)(writeEffect)
				const deliveries = 16
				var wg sync.WaitGroup
				errs := make(chan error, deliveries)
				for range deliveries {
					wg.Go(func() {
						_, err := h(message.NewMessage("m-4", nil))
						errs <- err
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.EqualValues(t, 1, countEffects(t, db, "m-4"))
				require.EqualValues(t, deliveries-1, counters.Get("billing.invoice", metrics.Duplicate))
			})

			t.Run("two consumers each handle the message once", func(t *testing.T) {
				db := store.Open(t)
				effects(t, db)
				for _, consumer := range []string{"billing", "shipping", "billing"} {
					mw, err := inbox.New(inbox.Config{DB: db, Consumer: consumer})
					require.NoError(t, err)
					_, err = mw(writeEffect)(message.NewMessage("m-5", nil))
					require.NoError(t, err)
				}
				require.EqualValues(t, 2, countEffects(t, db, "m-5"))
			})

			t.Run("a key from metadata: one handling per ID and source, whatever the UUID", func(t *testing.T) {
				db := store.Open(t)
				mw, err := inbox.New(inbox.Config{DB: db, Consumer: "c", Key: inbox.MetadataKey("edi-control", "edi-sender")})
				require.NoError(t, err)
				var handled []string
				h := mw(func(msg *message.Message) ([]*message.Message, error) {
					handled = append(handled, msg.UUID)
					return nil, nil
				})
				for _, m := range []struct{ uuid, id, sender string }{
					{"u-1", "000000905", "ZZ:ACME"},
					{"u-2", "000000905", "ZZ:ACME"},  // the same interchange under a new UUID: a duplicate
					{"u-3", "000000905", "ZZ:OTHER"}, // the same number from another sender
					{"u-4", "000000906", "ZZ:ACME"},
				} {
					msg := message.NewMessage(m.uuid, nil)
					msg.Metadata.Set("edi-control", m.id)
					msg.Metadata.Set("edi-sender", m.sender)
					_, err := h(msg)
					require.NoError(t, err, m.uuid)
				}
				require.Equal(t, []string{"u-1", "u-3", "u-4"}, handled)
				var keys []struct{ Source, MessageID string }
				require.NoError(t, db.Raw("SELECT source, message_id FROM postroom_inbox ORDER BY message_id, source").Scan(&keys).Error)
				require.Equal(t, []struct{ Source, MessageID string }{
					{"ZZ:ACME", "000000905"}, {"ZZ:OTHER", "000000905"}, {"ZZ:ACME", "000000906"},
				}, keys)
				_, err = h(message.NewMessage("u-5", nil)) // no edi-control metadata
				require.ErrorIs(t, err, inbox.ErrBadKey)
				require.Len(t, handled, 3)
			})

			t.Run("bad keys are unrecoverable errors and the handler is not called", func(t *testing.T) {
				db := store.Open(t)
				called := false
				handler := func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil }
				cases := map[string]inbox.KeyFunc{
					"empty":             inbox.DefaultKey,
					"over-long":         func(*message.Message) (inbox.Key, error) { return inbox.Key{MessageID: strings.Repeat("x", 201)}, nil },
					"key error":         func(*message.Message) (inbox.Key, error) { return inbox.Key{}, errors.New("no ISA13 segment") },
					"bad source":        func(*message.Message) (inbox.Key, error) { return inbox.Key{Source: "\xff", MessageID: "1"}, nil },
					"NUL in the ID":     func(*message.Message) (inbox.Key, error) { return inbox.Key{MessageID: "isa\x00905"}, nil },
					"NUL in the source": func(*message.Message) (inbox.Key, error) { return inbox.Key{Source: "ZZ\x00ACME", MessageID: "1"}, nil },
				}
				for name, key := range cases {
					mw, err := inbox.New(inbox.Config{DB: db, Consumer: "c", Key: key})
					require.NoError(t, err)
					_, err = mw(handler)(message.NewMessage("", nil))
					require.ErrorIs(t, err, inbox.ErrBadKey, name)
					var unrecoverable interface{ Unrecoverable() bool }
					require.ErrorAs(t, err, &unrecoverable, name)
				}
				require.False(t, called)
			})
		})
	}
}

func TestConfigIsValidated(t *testing.T) {
	db := testenv.SQLite(t)
	_, err := inbox.New(inbox.Config{})
	require.ErrorContains(t, err, "Config.DB is nil")
	_, err = inbox.New(inbox.Config{DB: db, Table: "inbox; DROP TABLE x"})
	require.ErrorContains(t, err, "bad table name")
}

func TestJoinsAnOuterUnitOfWork(t *testing.T) {
	db := testenv.SQLite(t)
	effects(t, db)
	uow, err := unitofwork.New(unitofwork.Config{DB: db})
	require.NoError(t, err)
	h := uow(newInbox(t, db, nil)(func(msg *message.Message) ([]*message.Message, error) {
		_, _ = writeEffect(msg)
		return nil, errors.New("fail after the write")
	}))
	msg := message.NewMessage("m-6", nil)
	msg.SetContext(context.Background())
	_, err = h(msg)
	require.Error(t, err)
	require.EqualValues(t, 0, countEffects(t, db, "m-6"))
	var rows int64
	require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_inbox").Scan(&rows).Error)
	require.Zero(t, rows, "the inbox row rolls back with the outer transaction")
}

package sql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	wsql "github.com/postroom/postroom/transport/sql"
)

type ForeignOrder struct {
	ID string `json:"id"`
}

func (ForeignOrder) MessageName() string { return "foreign.Order" }

// TestForeignRows: rows another program inserts into a topic's table with
// plain SQL (metadata of every JSON type, no ID, a payload that is not
// JSON, metadata that is not a JSON object, another message type) are
// each handled once or moved to the error topic with the reason, and the
// good row after each is handled. With watermill-sql's own adapters the
// first row fails to read at every poll, forever, and nothing after it is
// handled.
func TestForeignRows(t *testing.T) {
	for _, store := range []struct {
		name   string
		open   func(testing.TB) *gorm.DB
		insert string // %s: the quoted table
	}{
		{"postgres", testenv.Postgres, `INSERT INTO %s (uuid, payload, metadata, transaction_id) VALUES (?, ?, ?, pg_current_xact_id())`},
		{"mariadb", testenv.MySQL, "INSERT INTO %s (uuid, payload, metadata) VALUES (?, ?, ?)"},
	} {
		t.Run(store.name, func(t *testing.T) {
			db := store.open(t)
			tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			endpoint, errorTopic := testenv.Name("foreign"), testenv.Name("error_")
			errs := subscribe(t, tr, errorTopic)
			b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: tr, DB: db, ErrorTopic: errorTopic,
				Retry: bus.RetryPolicy{NoRetries: true}, Logger: testenv.Logger(t)})
			require.NoError(t, err)
			var mu sync.Mutex
			handled := map[string][]map[string]string{}
			require.NoError(t, bus.Handle(b, func(ctx context.Context, o *ForeignOrder) error {
				mu.Lock()
				defer mu.Unlock()
				handled[bus.MessageID(ctx)] = append(handled[bus.MessageID(ctx)], bus.Metadata(ctx))
				return nil
			}, bus.WithInbox()))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			t.Cleanup(func() { cancel(); require.NoError(t, <-done); _ = b.Close() })
			<-b.Running()

			table := fmt.Sprintf(`"watermill_%s"`, bus.CommandTopic(endpoint, bus.MessageName[ForeignOrder]()))
			if store.name == "mariadb" {
				table = fmt.Sprintf("`watermill_%s`", bus.CommandTopic(endpoint, bus.MessageName[ForeignOrder]()))
			}
			insert := func(id, payload, md string) {
				require.NoError(t, db.Exec(fmt.Sprintf(store.insert, table), id, []byte(payload), md).Error)
			}
			good := 0
			insertGood := func() {
				good++
				insert(fmt.Sprintf("good-%d", good), `{"id":"g"}`, `{"postroom-message-type":"foreign.Order"}`)
			}
			insert("types", `{"id":"t"}`, `{"str":"s","int":1,"bool":true,"float":2.5,"null":null,"obj":{"a":1},"arr":[1,"x"]}`)
			insertGood()
			insert("", `{"id":"no-id"}`, `{}`)
			insertGood()
			insert("not-json", "<xml/> \x00", `{}`)
			insertGood()
			insert("array-metadata", `{"id":"a"}`, `[1,2]`)
			insertGood()
			insert("other-type", `{"id":"o"}`, `{"postroom-message-type":"other.Type"}`)
			insertGood()

			reasons, unread := map[string]string{}, map[string]string{}
			for len(reasons) < 4 {
				select {
				case msg := <-errs:
					msg.Ack()
					reasons[msg.UUID] = msg.Metadata.Get(metadata.ErrorReason)
					unread[msg.UUID] = msg.Metadata.Get(metadata.UnreadMetadata)
				case <-time.After(30 * time.Second):
					t.Fatalf("only %d of 4 rows reached the error topic: %v", len(reasons), reasons)
				}
			}
			require.Contains(t, reasons[""], "message ID is empty")
			require.Contains(t, reasons["not-json"], "malformed")
			require.Contains(t, reasons["array-metadata"], "metadata is not a JSON object")
			// What the producer sent is kept for the operator, not dropped.
			require.JSONEq(t, `[1,2]`, unread["array-metadata"])
			require.Contains(t, reasons["other-type"], "unknown message type")

			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(handled) == good+1
			}, 30*time.Second, 20*time.Millisecond, "every good row and the typed one handled")
			time.Sleep(200 * time.Millisecond) // room for a wrong second delivery
			mu.Lock()
			defer mu.Unlock()
			for id, deliveries := range handled {
				require.Len(t, deliveries, 1, id)
			}
			md := handled["types"][0]
			for k, want := range map[string]string{"str": "s", "int": "1", "bool": "true", "float": "2.5", "null": "", "obj": `{"a":1}`, "arr": `[1,"x"]`} {
				require.Equal(t, want, md[k], k)
			}
		})
	}
}

// subscribe reads topic in a group of its own, declared now.
func subscribe(t *testing.T, tr *wsql.Transport, topic string) <-chan *message.Message {
	t.Helper()
	sub, err := tr.Subscriber(testenv.Name("errors_"), 1)
	require.NoError(t, err)
	require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	return msgs
}

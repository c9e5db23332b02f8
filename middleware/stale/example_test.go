package stale_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/middleware/stale"
	"github.com/postroom/postroom/store"
)

// Updates of one customer arrive out of order: the one older than an
// update already applied is dropped.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "stale")
	defer os.RemoveAll(dir)
	db, _ := store.Open(filepath.Join(dir, "app.db"))
	defer store.Close(db)
	_, _ = store.Migrate(context.Background(), db, store.Tables{})

	mw, _ := stale.New(stale.Config{DB: db, Consumer: "addresses"})
	handler := mw(func(msg *message.Message) ([]*message.Message, error) {
		fmt.Println("applied", string(msg.Payload))
		return nil, nil
	})
	t0 := time.Now().Add(-time.Hour)
	for i, u := range []struct {
		address string
		at      time.Time
	}{
		{"2 New Street", t0.Add(2 * time.Minute)},
		{"1 Old Road", t0.Add(time.Minute)}, // older: stale
		{"3 Last Lane", t0.Add(3 * time.Minute)},
	} {
		msg := message.NewMessage(fmt.Sprint(i), []byte(u.address))
		msg.Metadata.Set(metadata.MessageType, "crm.AddressChanged")
		msg.Metadata.Set(metadata.EntityID, "customer-1")
		msg.Metadata.Set(metadata.Version, u.at.Format(time.RFC3339Nano))
		_, _ = handler(msg)
	}
	// Output:
	// applied 2 New Street
	// applied 3 Last Lane
}

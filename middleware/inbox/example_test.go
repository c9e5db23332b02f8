package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/middleware/unitofwork"
	"github.com/postroom/postroom/store"
)

// The inbox on a plain Watermill handler: the second delivery of a message
// is acked without running the handler, and a failed attempt leaves no key.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "inbox")
	defer os.RemoveAll(dir)
	db, _ := store.Open(filepath.Join(dir, "app.db"))
	defer store.Close(db)
	_, _ = store.Migrate(context.Background(), db, store.Tables{})
	db.Exec("CREATE TABLE payments (message_id TEXT)")

	mw, _ := inbox.New(inbox.Config{DB: db, Consumer: "payments"})
	fail := true
	handler := mw(func(msg *message.Message) ([]*message.Message, error) {
		if err := unitofwork.Tx(msg.Context()).Exec("INSERT INTO payments VALUES (?)", msg.UUID).Error; err != nil {
			return nil, err
		}
		if fail {
			fail = false
			return nil, fmt.Errorf("payment gateway timed out")
		}
		fmt.Println("handled", msg.UUID)
		return nil, nil
	})
	for range 3 { // the first attempt fails, then two deliveries of the same message
		if _, err := handler(message.NewMessage("pay-1", nil)); err != nil {
			fmt.Println("error:", err)
		}
	}
	var n int64
	db.Raw("SELECT COUNT(*) FROM payments").Scan(&n)
	fmt.Println("payments:", n)
	// Output:
	// error: payment gateway timed out
	// handled pay-1
	// payments: 1
}

package bench

import (
	"context"
	"fmt"
	"io"

	"gorm.io/gorm"

	"github.com/postroom/postroom/transport/gochannel"
)

// runRedelivery delivers every message twice (the same ID, back to back)
// at concurrency 8, through the naive handler and through the inbox, and
// reports how many were applied twice: the reason the naive way is wrong.
func runRedelivery(ctx context.Context, db *gorm.DB, n int64, out io.Writer) error {
	doubled := map[Kind]int64{}
	for _, kind := range []Kind{Naive, Inbox} {
		if err := db.Exec(truncateAll).Error; err != nil {
			return err
		}
		if _, err := runE2EWith(ctx, gochannel.New(gochannel.Config{}), db, kind, 8, n, e2eOptions{copies: 2}); err != nil {
			return fmt.Errorf("redelivery %s: %w", kind, err)
		}
		var rows, distinct int64
		if err := db.Raw("SELECT COUNT(*), COUNT(DISTINCT message_id) FROM business").Row().Scan(&rows, &distinct); err != nil {
			return err
		}
		doubled[kind] = rows - distinct
	}
	fmt.Fprintf(out, "redelivery: %d messages each delivered twice at concurrency 8: naive way applied %d twice, inbox %d\n",
		n, doubled[Naive], doubled[Inbox])
	return nil
}

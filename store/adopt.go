package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// AdoptLegacyKeys carries keys written before a consumer named its
// endpoint over to consumer: the inbox keys of legacyInbox (the handler's
// name alone, postroom before migration 5) when legacyInbox is not empty,
// and the watermarks without a consumer when watermarks is true. It copies
// only to a consumer that has no key yet, so it costs one index probe once
// done; the old rows stay for other endpoints on the same database until
// cleanup purges them. The bus calls it in Run.
func AdoptLegacyKeys(ctx context.Context, db *gorm.DB, tables Tables, consumer, legacyInbox string, watermarks bool) error {
	d, names, err := prepare(db, tables)
	if err != nil {
		return err
	}
	db = db.WithContext(ctx)
	if legacyInbox != "" {
		if err := adopt(ctx, db, d.InboxAdopt(names.Inbox), consumer, legacyInbox, consumer); err != nil {
			return fmt.Errorf("store: adopt inbox keys of %q for %q: %w", legacyInbox, consumer, err)
		}
	}
	if watermarks {
		if err := adopt(ctx, db, d.WatermarkAdopt(names.Watermarks), consumer, consumer); err != nil {
			return fmt.Errorf("store: adopt watermarks for %q: %w", consumer, err)
		}
	}
	return nil
}

// adopt runs one copy, again when it lost to contention: instances of a
// rollout starting together copy the same keys, and on MariaDB two of
// three exited at start with a deadlock (a cold trial). Once one copy has
// committed, the others copy nothing.
func adopt(ctx context.Context, db *gorm.DB, query string, args ...any) error {
	_, err := dialect.ExecContended(ctx, db, query, args...)
	return err
}

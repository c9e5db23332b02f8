package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
)

// Tables names postroom's tables; an unset field takes its default. Each
// name must be a plain identifier (letters, digits, '_'). Three tables
// always have their default names: postroom_migrations (applied
// versions), postroom_delayed (bus.DeliverAt and delayed retries) and
// postroom_deliveries (redelivery counts where the transport keeps none).
type Tables struct {
	// Inbox holds one row per handled message key. Defaults to "postroom_inbox".
	Inbox string
	// Watermarks holds the newest version per entity. Defaults to "postroom_stale_watermarks".
	Watermarks string
	// Schedules holds the durable schedules. Defaults to "postroom_schedules".
	Schedules string
}

// WithDefaults returns t with every unset name filled in.
func (t Tables) WithDefaults() Tables { return Tables(dialect.Tables(t).WithDefaults()) }

// Validate reports every name that is not a valid identifier.
func (t Tables) Validate() error { return dialect.Tables(t).Validate() }

// Migrate applies every migration not recorded yet, under a lock so that
// instances starting at once apply each step once, and returns them.
func Migrate(ctx context.Context, db *gorm.DB, names Tables) ([]int, error) {
	d, tables, err := prepare(db, names)
	if err != nil {
		return nil, err
	}
	stmts, err := d.MigrationsTable(dialect.MigrationsTableDefault)
	if err != nil {
		return nil, err
	}
	var applied []int
	err = db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		lock, unlock := d.MigrationLock()
		if lock != "" {
			if err := conn.Exec(lock).Error; err != nil {
				return fmt.Errorf("store: take migration lock: %w", err)
			}
			defer conn.Exec(unlock)
		}
		if err := conn.Exec(stmts.Create).Error; err != nil {
			return fmt.Errorf("store: create %s: %w", dialect.MigrationsTableDefault, err)
		}
		for _, m := range d.Migrations(tables) {
			ran := false
			// One transaction for check and step: SQLite has no lock.
			// MySQL commits DDL at once; statements are idempotent and the
			// version row comes last, so a step cut short reruns.
			err := conn.Transaction(func(tx *gorm.DB) error {
				var n int64
				if err := tx.Raw(stmts.Applied, m.Version).Scan(&n).Error; err != nil {
					return fmt.Errorf("store: read %s: %w", dialect.MigrationsTableDefault, err)
				}
				if n > 0 {
					return nil
				}
				for _, stmt := range m.Statements {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("store: migration %d (%s): %w", m.Version, m.Name, err)
					}
				}
				ran = true
				return tx.Exec(stmts.Record, m.Version, m.Name, d.Time(time.Now())).Error
			})
			if err != nil {
				return err
			}
			if ran {
				applied = append(applied, m.Version)
			}
		}
		return widenIDs(conn, d)
	})
	return applied, err
}

// widenIDs widens the ID column of every SQL-transport topic table that
// still has watermill-sql's 36 bytes (MySQL), where a longer ID would stop
// the outbox relay.
func widenIDs(conn *gorm.DB, d dialect.Dialect) error {
	q := d.NarrowIDTables()
	if q == "" {
		return nil
	}
	var narrow []string
	if err := conn.Raw(q).Scan(&narrow).Error; err != nil {
		return fmt.Errorf("store: list the topic tables with a narrow ID column: %w", err)
	}
	for _, table := range narrow {
		if err := conn.Exec(d.WidenID(table)).Error; err != nil {
			return fmt.Errorf("store: widen the ID column of %s: %w", table, err)
		}
	}
	return nil
}

// prepare returns db's dialect and the validated, defaulted table names.
func prepare(db *gorm.DB, tables Tables) (dialect.Dialect, dialect.Tables, error) {
	d, err := dialects.Of(db)
	if err != nil {
		return nil, dialect.Tables{}, err
	}
	if err := tables.Validate(); err != nil {
		return nil, dialect.Tables{}, err
	}
	return d, dialect.Tables(tables.WithDefaults()), nil
}

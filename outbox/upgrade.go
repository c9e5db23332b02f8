package outbox

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// upgradeMySQL finishes what migration 8 does to an outbox table of
// MySQL/MariaDB (dialect.OutboxAckedRows), for a table it did not reach (a
// topic of its own, a table the relay created) or left half done: the
// acked column, its index, and the rows the relay had acked through its
// consumer group's offset marked, that offset's row deleted in the same
// transaction. The relay starts only after that: while the row exists, a
// row it had acked would read as not acked and be relayed again. Several
// processes may run it at once: the offsets row is locked, and a column or
// index another one added is no error.
func (o *Outbox) upgradeMySQL(ctx context.Context) error {
	db := o.cfg.DB.WithContext(ctx)
	if db.Exec(o.d.OutboxTablesExist(o.cfg.Topic)).Error != nil {
		if err := db.Exec(o.d.OutboxAddAcked(o.cfg.Topic)).Error; err != nil && !dialect.MySQLError(err, 1060) { // ER_DUP_FIELDNAME
			return err
		}
	}
	var indexes int64
	if err := db.Raw(o.d.OutboxAckedIndexExists(o.cfg.Topic)).Scan(&indexes).Error; err != nil {
		return err
	}
	if indexes == 0 {
		if err := db.Exec(o.d.OutboxAddAckedIndex(o.cfg.Topic)).Error; err != nil && !dialect.MySQLError(err, 1061) { // ER_DUP_KEYNAME
			return err
		}
	}
	return db.Transaction(func(tx *gorm.DB) error {
		var acked sql.NullInt64
		err := tx.Raw(o.d.OutboxRelayOffset(o.cfg.Topic)).Row().Scan(&acked)
		switch {
		case errors.Is(err, sql.ErrNoRows), dialect.MySQLError(err, 1146): // ER_NO_SUCH_TABLE: never had offsets
			return nil
		case err != nil:
			return err
		}
		if err := tx.Exec(o.d.OutboxMarkAcked(o.cfg.Topic), acked.Int64).Error; err != nil {
			return err
		}
		return tx.Exec(o.d.OutboxForgetRelayOffset(o.cfg.Topic)).Error
	})
}

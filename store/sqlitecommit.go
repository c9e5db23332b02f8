package store

import (
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/sqlitedriver"
)

// SQLiteCommitWarning is what a SQLite *gorm.DB not opened by Open lacks,
// or "": glebarez/go-sqlite keeps SQLite's transaction open when COMMIT
// fails (a deferred foreign key, a full disk), and database/sql hands the
// connection to the next transaction, whose BEGIN then fails while reads
// see the failed transaction's writes. Open's pool rolls such a
// transaction back (internal/sqlitedriver). The bus says it at Run.
func SQLiteCommitWarning(db *gorm.DB) string {
	if d, err := dialect.Of(db); err != nil || d != dialect.SQLite {
		return ""
	}
	sqlDB, err := db.DB()
	if err != nil || sqlitedriver.Opened(sqlDB) {
		return ""
	}
	return "this SQLite *gorm.DB was not opened by store.Open: a COMMIT that fails (a deferred foreign key, a full disk) " +
		"leaves its transaction open on the connection, the next message's BEGIN fails and reads see the failed message's writes; " +
		"open it with store.Open (\"sqlite:path\")"
}

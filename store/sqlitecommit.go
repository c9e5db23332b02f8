package store

import (
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
)

// SQLiteCommitWarning is what a SQLite *gorm.DB not opened by Open lacks,
// or "": a COMMIT that fails leaves its transaction open on the connection
// (internal/dialect/sqlite), which Open's pool rolls back. The bus says it
// at Run.
func SQLiteCommitWarning(db *gorm.DB) string {
	d, err := dialects.Of(db)
	if err != nil {
		return ""
	}
	sqlDB, err := db.DB()
	if err != nil {
		return ""
	}
	return d.PoolWarning(sqlDB)
}

package storeinfo

import (
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialects"
)

// PoolWarning is what the pool of a *gorm.DB not opened by store.Open
// lacks, or "": on SQLite a COMMIT that fails leaves its transaction open
// on the connection (internal/dialect/sqlite), which store.Open's pool
// rolls back. The bus says it at Run.
func PoolWarning(db *gorm.DB) string {
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

package dsnparse_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/store"
)

func TestPlanNamesTheDialect(t *testing.T) {
	pg, err := dsnparse.Plan("postgres://u@h/db", dialect.Tables{Inbox: "ops.inbox"})
	require.NoError(t, err)
	require.Contains(t, strings.Join(pg, "\n"), "CREATE TABLE IF NOT EXISTS ops.inbox")
	require.Contains(t, strings.Join(pg, "\n"), "USING BRIN")
	my, err := dsnparse.Plan("mysql://root@tcp(h:3306)/db", dialect.Tables{})
	require.NoError(t, err)
	require.Contains(t, strings.Join(my, "\n"), "DATETIME(6)")
}

// TestPlanRefusesWhatOpenRefuses: a DSN that is not clearly one database
// has no plan either (the same DSNs as store's TestOnlyClearDSNsOpen).
func TestPlanRefusesWhatOpenRefuses(t *testing.T) {
	for _, dsn := range []string{"db.prod.example.com", "prod", "app.db.bak", "  ", "postgress://app:s3cret@db/x", "mariadb://db/x", "sqlite3://x.db"} {
		_, err := dsnparse.Plan(dsn, dialect.Tables{})
		require.ErrorIs(t, err, store.ErrBadDSN, dsn)
	}
}

func TestRedactText(t *testing.T) {
	require.Equal(t, "auth failed for xxxxx at postgres://app:xxxxx@db/x", dsnparse.RedactText("auth failed for s3 cret at postgres://app:s3%20cret@db/x", "postgres://app:s3%20cret@db/x"))
}

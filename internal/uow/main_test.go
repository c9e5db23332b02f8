package uow_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// gorm's prepared-statement cache (Session{PrepareStmt}) starts an
	// expiry goroutine that it never stops (gorm/internal/lru: "done
	// channel is never closed").
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

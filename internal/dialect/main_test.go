package dialect_test

import (
	"testing"

	"github.com/postroom/postroom/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.VerifyTestMain(m)
}

package console

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedact: an error that quotes a secret (a driver that prints its
// DSN, a broker that prints its URL) is shown without its password, and
// the token is never shown.
func TestRedact(t *testing.T) {
	c := &Console{cfg: Config{
		AMQPURL: "amqp://ops:amqp-pw@rabbit:5672/",
		Token:   "tok-123",
		Secrets: []string{"postgres://app:db-pw@db:5432/app", "host=db password=kw-pw dbname=app"},
	}}
	text := c.redact(errors.New("dial amqp://ops:amqp-pw@rabbit:5672/: refused; open postgres://app:db-pw@db:5432/app?x=1; " +
		"host=db password=kw-pw dbname=app; bearer tok-123"))
	for _, secret := range []string{"amqp-pw", "db-pw", "kw-pw", "tok-123"} {
		require.NotContains(t, text, secret)
	}
	require.Contains(t, text, "rabbit:5672", "the rest stays readable")
}

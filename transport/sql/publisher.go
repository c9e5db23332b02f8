package sql

import (
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/internal/dialect"
)

// publisher is watermill-sql's publisher whose refusal of an ID too long
// for an old topic table says to run `postroom migrate`.
type publisher struct {
	*wsql.Publisher
}

// Publish publishes msgs to topic.
func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	if err != nil && dialect.MySQLError(err, 1406) && strings.Contains(err.Error(), "'uuid'") { // ER_DATA_TOO_LONG
		return fmt.Errorf("%w (the topic's table is from before postroom widened its ID column to %d bytes: run `postroom migrate`, which widens it)",
			err, dialect.MessageIDColumnLength)
	}
	return err
}

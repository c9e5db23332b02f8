package sql

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// groupsAlterWait bounds how long making a topic's groups binary waits for
// the transactions reading the offsets table (a subscription of a running
// process holds one while its message is handled): past it the topic
// keeps its old column until the next start.
const groupsAlterWait = 5 * time.Second

// binaryGroups makes the group column of topic's offsets table binary on
// MySQL/MariaDB where a table created before has it case insensitive
// (dialect.GroupsBinary): there two groups alike but for case shared one
// offsets row and each got a part of the messages. It runs once per table
// and database: once altered, the check finds the binary column. An ALTER
// that cannot get the table within groupsAlterWait is said at warn, with
// the statement, and the subscription goes on.
func (s *subscriber) binaryGroups(topic string) error {
	check, table, alter := s.t.dialect.GroupsBinary(topic)
	if check == "" {
		return nil
	}
	db := s.t.cfg.DB
	var types []string
	if err := db.Raw(check, table).Scan(&types).Error; err != nil {
		return fmt.Errorf("read the group column of %s: %w", table, err)
	}
	if len(types) == 0 || types[0] == "varbinary" {
		return nil
	}
	err := db.Connection(func(conn *gorm.DB) error {
		if err := conn.Exec(fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(groupsAlterWait/time.Second))).Error; err != nil {
			return err
		}
		defer conn.Exec("SET SESSION lock_wait_timeout = DEFAULT")
		return conn.Exec(alter).Error
	})
	if err != nil {
		s.t.log.Logger().Warn("sql: could not make the consumer groups of a topic case sensitive; groups named alike but for case share one offsets row and each gets a part of the messages until it is done: run the statement by hand or restart",
			"topic", topic, "statement", alter, "error", err)
		return nil
	}
	s.t.log.Logger().Info("sql: made the consumer groups of a topic case sensitive (its offsets table predates it)", "topic", topic, "table", table)
	return nil
}

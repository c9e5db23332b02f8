package sql

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// groupsAlterWait bounds how long making a topic's groups binary waits for
// the readers of the offsets table; past it the column stays as it was
// until the next start.
const groupsAlterWait = 5 * time.Second

// binaryGroups makes the group column of topic's offsets table binary where
// an older MySQL/MariaDB table has it case insensitive (dialect.GroupsBinary):
// two groups alike but for case would share one offsets row. It looks once
// per table and process. An ALTER that fails within groupsAlterWait is
// logged at warn with the statement, and the subscription goes on.
func (s *subscriber) binaryGroups(topic string) error {
	up := s.t.dialect.GroupsBinary(topic)
	if up.Check == "" {
		return nil
	}
	if _, tried := s.t.groupsChecked.LoadOrStore(up.Table, true); tried {
		return nil // once per table and process: each subscription declares its topic, some twice
	}
	db := s.t.cfg.DB
	binary := func(conn *gorm.DB) (bool, error) {
		var types []string
		if err := conn.Raw(up.Check, up.Table).Scan(&types).Error; err != nil {
			return false, fmt.Errorf("read the group column of %s: %w", up.Table, err)
		}
		return len(types) == 0 || types[0] == "varbinary", nil
	}
	if ok, err := binary(db); ok || err != nil {
		return err
	}
	err := db.Connection(func(pinned *gorm.DB) error {
		// A fresh instance per statement: on Connection's own, a failed
		// ALTER's error sticks and the restore never runs.
		conn := pinned.Session(&gorm.Session{NewDB: true})
		var was int64
		if err := conn.Raw(up.Wait).Scan(&was).Error; err != nil {
			return err
		}
		if err := conn.Exec(fmt.Sprintf(up.SetWait, int(groupsAlterWait/time.Second))).Error; err != nil {
			return err
		}
		alterErr := conn.Exec(up.Alter).Error
		// Restore the session's own value (a DSN may have set it) before
		// the connection goes back to the pool.
		if err := conn.Exec(fmt.Sprintf(up.SetWait, was)).Error; err != nil {
			return fmt.Errorf("restore lock_wait_timeout: %w (after: %v)", err, alterErr)
		}
		return alterErr
	})
	if err != nil {
		if ok, _ := binary(db); ok {
			return nil // another process's ALTER got there first
		}
		s.t.log.Logger().Warn("sql: could not make the consumer groups of a topic case sensitive; groups named alike but for case share one offsets row and each gets a part of the messages until it is done: run the statement by hand or restart",
			"topic", topic, "statement", up.Alter, "error", err)
		return nil
	}
	s.t.log.Logger().Info("sql: made the consumer groups of a topic case sensitive (its offsets table predates it)", "topic", topic, "table", up.Table)
	return nil
}

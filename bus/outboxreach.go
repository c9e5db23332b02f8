package bus

import (
	"fmt"
	"os"

	"github.com/postroom/postroom/internal/dialect"
)

// outboxReach is the reach the bus's outbox messages are written with and
// its relay compares (outbox.Config.Reach): the transport's, or, in memory,
// this process's, since the endpoints of one process may share an
// in-memory transport. Its limits: docs/guarantees.md.
func (b *Bus) outboxReach() string {
	if reach := b.cfg.Transport.Capabilities().Reach; reach != "" {
		return dialect.DelayedByReach(reach)
	}
	return processReach
}

// processReach names this process: host name and process ID.
var processReach = func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("memory@%s/%d", host, os.Getpid())
}()

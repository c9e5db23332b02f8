package bus

import (
	"fmt"
	"os"

	"github.com/postroom/postroom/internal/dialect"
)

// outboxReach is the reach the bus's outbox messages are written with and
// its relay compares (outbox.Config.Reach): the transport's
// (transport.Capabilities.Reach, as for delayed deliveries), or, for a transport
// without one (in memory), this process's. Every endpoint of one process
// may share an in-memory transport, and their relays publish each other's
// messages rightly; a relay of another process, whose in-memory transport
// nobody here reads, says so. With an in-memory reach per endpoint, two
// endpoints sharing one in-memory transport and a database would be said
// at error to publish where nobody reads.
//
// What a reach per process cannot tell: two in-memory transports in one
// process (each endpoint with its own) share it, and are not said; after a
// restart, the rows the last process left are said once, from the old
// process's reach (docs/guarantees.md).
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

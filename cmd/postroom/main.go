// Command postroom is the operator's tool: it applies postroom's schema
// and, in later versions, shows and acts on inboxes, schedules and failed
// messages.
//
//	postroom migrate [--dsn DSN] [--print]
//
// The DSN comes from --dsn, else POSTROOM_DSN, else POSTROOM_POSTGRES_DSN.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "postroom:", err)
		os.Exit(1)
	}
}

// Command postroom is the operator's tool: it applies postroom's schema,
// shows and purges the inbox, and controls the durable schedules.
//
//	postroom migrate [--print]
//	postroom inbox stats [--json]
//	postroom inbox purge --older-than 240h
//	postroom schedules list [--json] | trigger NAME | pause NAME | resume NAME
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

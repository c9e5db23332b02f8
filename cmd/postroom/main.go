// Command postroom is the operator's tool: it applies postroom's schema,
// shows and purges the inbox, resolves the claims of handlers with external
// effects, controls the durable schedules, lists the topics and queues a
// producer in another language publishes to, and lists, shows and replays
// the messages in the error topic.
//
//	postroom migrate [--print]
//	postroom inbox stats [--json]
//	postroom inbox purge --older-than 240h [--batch N] [--pause D] [--force]
//	postroom inbox unresolved [--json] [--limit N]
//	postroom inbox resolve CONSUMER MESSAGE_ID --source SOURCE (--done | --release) [--attempts N]
//	postroom schedules list [--json]
//	postroom schedules trigger NAME | pause NAME | resume NAME
//	postroom delayed list [--json] [--limit N]
//	postroom routes [--endpoint E] [--command NAME]... [--event NAME]... [--handler H] [--json]
//	postroom errors list [--json] | show ID | replay (ID... | --all) | delete (ID... | --all)
//	postroom console [--amqp URL] [--listen 127.0.0.1:8080] [--token T] [--read-only]
//
// The commands that use a database take --dsn, else POSTROOM_DSN, else
// POSTROOM_POSTGRES_DSN, else POSTROOM_MYSQL_DSN; the errors commands take
// --amqp, else POSTROOM_AMQP_URL. Neither value is ever printed with its
// password. A DSN names PostgreSQL (postgres://, postgresql:// or
// host=… dbname=…), MySQL (mysql:// or user:pass@tcp(host:3306)/db) or
// SQLite (sqlite:path, sqlite://path, file:, :memory: or a path ending in
// .db, .sqlite or .sqlite3); anything else is refused. A missing or
// unknown command is an error (exit status 1).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "postroom:", err)
		os.Exit(1)
	}
}

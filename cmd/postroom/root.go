package main

import (
	"cmp"
	"errors"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
)

// options are the flags every subcommand shares.
type options struct {
	dsn    string
	tables store.Tables
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	opts := &options{}
	root := &cobra.Command{
		Use:           "postroom",
		Short:         "Operate postroom: its schema, inboxes, schedules and failed messages",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&opts.dsn, "dsn", cmp.Or(os.Getenv("POSTROOM_DSN"), os.Getenv("POSTROOM_POSTGRES_DSN"), os.Getenv("POSTROOM_MYSQL_DSN")),
		"database: postgres://…, mysql://…, a SQLite file or :memory: (env POSTROOM_DSN, then POSTROOM_POSTGRES_DSN, then POSTROOM_MYSQL_DSN)")
	root.PersistentFlags().StringVar(&opts.tables.Inbox, "inbox-table", "", "inbox table (default postroom_inbox)")
	root.PersistentFlags().StringVar(&opts.tables.Watermarks, "watermarks-table", "", "watermark table (default postroom_stale_watermarks)")
	root.PersistentFlags().StringVar(&opts.tables.Schedules, "schedules-table", "", "schedules table (default postroom_schedules)")
	root.AddCommand(newMigrate(opts), newInbox(opts), newSchedules(opts), newErrors())
	return root
}

func (o *options) open() (*gorm.DB, error) {
	if o.dsn == "" {
		return nil, errors.New("no database: pass --dsn or set POSTROOM_DSN")
	}
	if err := o.tables.Validate(); err != nil {
		return nil, err
	}
	return store.Open(o.dsn)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.DiscardHandler)
}

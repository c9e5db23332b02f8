package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/store"
)

// options are the database flags; each command registers those it uses
// (see databaseFlags).
type options struct {
	dsn    string
	tables store.Tables
	// cmd is the command that ran, whose flags say whether --dsn was given.
	cmd *cobra.Command
	// secrets are the DSN and URL in use, whose passwords execute redacts
	// from any error.
	secrets []string
}

// dsnEnv are the variables --dsn defaults to, in order.
var dsnEnv = []string{"POSTROOM_DSN", "POSTROOM_POSTGRES_DSN", "POSTROOM_MYSQL_DSN"}

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *options) {
	opts := &options{}
	root := &cobra.Command{
		Use:           "postroom",
		Short:         "Operate postroom: its schema, inboxes, schedules, routes and failed messages",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			opts.cmd = cmd
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newMigrate(opts), newInbox(opts), newSchedules(opts), newErrors(opts), newRoutes(), newConsole(opts), newDelayed(opts))
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return err
			}
			if len(rest) > 0 { // an unknown command, or an argument
				if err := cmd.ValidateArgs(rest); err != nil {
					return err
				}
			}
			return cmd.Help()
		},
	})
	requireSubcommands(root)
	return root, opts
}

// execute runs the command line args; its error never shows a password of
// the DSN or the broker URL in use.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root, opts := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, s := range opts.secrets {
		text = dsnparse.RedactText(text, s)
	}
	if text != err.Error() {
		return errors.New(text)
	}
	return err
}

// tableFlag names a table flag a command may take.
type tableFlag int

const (
	inboxTable tableFlag = iota
	watermarksTable
	schedulesTable
)

// databaseFlags gives cmd --dsn and the table flags it uses.
func (o *options) databaseFlags(cmd *cobra.Command, tables ...tableFlag) *cobra.Command {
	cmd.Flags().StringVar(&o.dsn, "dsn", "", "database: postgres://…, host=… dbname=…, mysql://…, user:pass@tcp(host:3306)/db, sqlite:path or a file *.db "+
		"(default: $"+strings.Join(dsnEnv, ", then $")+")")
	defaults := store.Tables{}.WithDefaults()
	for _, t := range tables {
		switch t {
		case inboxTable:
			cmd.Flags().StringVar(&o.tables.Inbox, "inbox-table", "", "inbox table (default: "+defaults.Inbox+")")
		case watermarksTable:
			cmd.Flags().StringVar(&o.tables.Watermarks, "watermarks-table", "", "watermark table (default: "+defaults.Watermarks+")")
		case schedulesTable:
			cmd.Flags().StringVar(&o.tables.Schedules, "schedules-table", "", "schedules table (default: "+defaults.Schedules+")")
		}
	}
	return cmd
}

// databaseDSN is --dsn if given, else the first variable of dsnEnv set.
func (o *options) databaseDSN() (string, error) {
	dsn := o.dsn
	if o.cmd == nil || !o.cmd.Flags().Changed("dsn") {
		for _, env := range dsnEnv {
			dsn = cmp.Or(dsn, os.Getenv(env))
		}
	}
	if dsn == "" {
		return "", errors.New("no database: pass --dsn or set POSTROOM_DSN")
	}
	o.secrets = append(o.secrets, dsn)
	return dsn, nil
}

func (o *options) open() (*gorm.DB, error) { return o.openDB(false) }

// openDB opens the database; a missing SQLite file is an error unless
// create (migrate), not an empty file made of a mistyped path.
func (o *options) openDB(create bool) (*gorm.DB, error) {
	dsn, err := o.databaseDSN()
	if err != nil {
		return nil, err
	}
	if file, ok := dsnparse.LocalFile(dsn); ok && !create {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no SQLite database at %s: check the path, or create it with `postroom migrate --dsn %s`", file, store.Redact(dsn))
		}
	}
	if err := o.tables.Validate(); err != nil {
		return nil, err
	}
	return store.Open(dsn)
}

// requireSubcommands makes every command with subcommands fail when none
// or an unknown one is named; cobra would print the help and exit 0.
func requireSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		requireSubcommands(sub)
	}
	if !cmd.HasSubCommands() {
		return
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return fmt.Errorf("%s: run '%s --help' for its commands", msg, cmd.CommandPath())
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var names []string
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return fmt.Errorf("%s needs a command: %s (see '%s --help')", cmd.CommandPath(), strings.Join(names, ", "), cmd.CommandPath())
	}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.DiscardHandler)
}

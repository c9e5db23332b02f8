package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dsnparse"
	"github.com/postroom/postroom/store"
)

func newMigrate(opts *options) *cobra.Command {
	var print bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade postroom's tables (all six: inbox, watermarks, schedules, delayed, deliveries, migrations)",
		Long: `migrate applies every schema version the database has not recorded yet,
under a lock, so several instances may run it at once. With --print it
only prints the SQL of every version for this kind of database (for a DBA
to review or apply), without connecting.

Three tables can be renamed here: --inbox-table, --watermarks-table and
--schedules-table. The others get their default names: postroom_delayed,
postroom_deliveries and postroom_migrations. A bus (bus.New) uses the
default name of every table, so rename tables only for the inbox, stale
and scheduler packages used without the bus.`,
		Example: `  postroom migrate --dsn 'postgres://postgres@127.0.0.1:5432/app?sslmode=disable'
  postroom migrate --print --dsn 'mysql://root@tcp(127.0.0.1:3306)/app'
  postroom migrate --print --dsn sqlite:app.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if print {
				dsn, err := opts.databaseDSN()
				if err != nil {
					return err
				}
				stmts, err := dsnparse.Plan(dsn, dialect.Tables(opts.tables))
				if err != nil {
					return err
				}
				for _, s := range stmts {
					if strings.HasPrefix(s, "--") {
						fmt.Fprintln(cmd.OutOrStdout(), s)
						continue
					}
					fmt.Fprintln(cmd.OutOrStdout(), s+";")
				}
				return nil
			}
			db, err := opts.openDB(true)
			if err != nil {
				return err
			}
			defer store.Close(db)
			applied, err := store.Migrate(cmd.Context(), db, opts.tables)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "migrate: up to date")
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrate: applied versions %v\n", applied)
			return nil
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the SQL instead of running it")
	return opts.databaseFlags(cmd, inboxTable, watermarksTable, schedulesTable)
}

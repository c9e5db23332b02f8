package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/scheduler"
	"github.com/postroom/postroom/store"
)

func newSchedules(opts *options) *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Short: "List, trigger, pause and resume durable schedules"}
	cmd.AddCommand(newSchedulesList(opts))
	for _, action := range []struct {
		use, short string
		run        func(c *scheduler.Control, cmd *cobra.Command, name string) error
	}{
		{"trigger NAME", "Make a schedule due now: the next tick of any instance fires it", func(c *scheduler.Control, cmd *cobra.Command, name string) error {
			return c.Trigger(cmd.Context(), name, time.Now())
		}},
		{"pause NAME", "Stop a schedule from firing until resumed", func(c *scheduler.Control, cmd *cobra.Command, name string) error {
			return c.Pause(cmd.Context(), name)
		}},
		{"resume NAME", "Let a paused schedule fire again", func(c *scheduler.Control, cmd *cobra.Command, name string) error {
			return c.Resume(cmd.Context(), name)
		}},
	} {
		cmd.AddCommand(&cobra.Command{
			Use: action.use, Short: action.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				db, err := opts.open()
				if err != nil {
					return err
				}
				defer store.Close(db)
				c, err := scheduler.NewControl(db, opts.tables.Schedules)
				if err != nil {
					return err
				}
				if err := action.run(c, cmd, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: done\n", args[0])
				return nil
			},
		})
	}
	return cmd
}

type scheduleRow struct {
	Name        string     `json:"name"`
	Spec        string     `json:"spec"`
	NextRunAt   time.Time  `json:"next_run_at"`
	LastRunAt   *time.Time `json:"last_run_at,omitempty"`
	LastFiredBy string     `json:"last_fired_by"`
	Paused      bool       `json:"paused"`
}

func newSchedulesList(opts *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "list", Short: "Every stored schedule with its next and last run", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			d, err := dialect.Of(db)
			if err != nil {
				return err
			}
			table := opts.tables.WithDefaults().Schedules
			rows, err := db.WithContext(cmd.Context()).Raw("SELECT name, spec, next_run_at, last_run_at, last_fired_by, paused FROM " + table + " ORDER BY name").Rows()
			if err != nil {
				return err
			}
			defer rows.Close()
			var list []scheduleRow
			for rows.Next() {
				var r scheduleRow
				var next, last any
				if err := rows.Scan(&r.Name, &r.Spec, &next, &last, &r.LastFiredBy, &r.Paused); err != nil {
					return err
				}
				if r.NextRunAt, err = d.ParseTime(next); err != nil {
					return err
				}
				if t, err := d.ParseTime(last); err == nil && !t.IsZero() {
					r.LastRunAt = &t
				}
				list = append(list, r)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []scheduleRow{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSPEC\tNEXT RUN\tLAST RUN\tLAST FIRED BY\tPAUSED")
			for _, r := range list {
				last := "-"
				if r.LastRunAt != nil {
					last = r.LastRunAt.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\n", r.Name, r.Spec, r.NextRunAt.Format(time.RFC3339), last, r.LastFiredBy, r.Paused)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

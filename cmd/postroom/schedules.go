package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/internal/schedcontrol"
	"github.com/postroom/postroom/store"
)

func newSchedules(opts *options) *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Short: "List, trigger, pause and resume durable schedules"}
	cmd.AddCommand(newSchedulesList(opts))
	for _, action := range []struct {
		use, short string
		run        func(c *schedcontrol.Control, cmd *cobra.Command, name string) error
		said       func(name string, s schedcontrol.Stored) string // what now holds, from the stored schedule
	}{
		{"trigger NAME", "Make a schedule due now: the next tick of any instance fires it (a paused one is refused: resume it first)", func(c *schedcontrol.Control, cmd *cobra.Command, name string) error {
			return c.Trigger(cmd.Context(), name, time.Now())
		}, func(name string, s schedcontrol.Stored) string {
			return fmt.Sprintf("%s: due since %s: the next tick of a running instance fires it", name, s.NextRunAt.Format(time.RFC3339))
		}},
		{"pause NAME", "Stop a schedule from firing until resumed", func(c *schedcontrol.Control, cmd *cobra.Command, name string) error {
			return c.Pause(cmd.Context(), name)
		}, func(name string, _ schedcontrol.Stored) string {
			return fmt.Sprintf("%s: paused: it fires no more until `postroom schedules resume %s`", name, name)
		}},
		{"resume NAME", "Let a paused schedule fire again", func(c *schedcontrol.Control, cmd *cobra.Command, name string) error {
			return c.Resume(cmd.Context(), name)
		}, func(name string, s schedcontrol.Stored) string {
			return fmt.Sprintf("%s: resumed: next run at %s (slots missed while paused follow its missed-slot policy)", name, s.NextRunAt.Format(time.RFC3339))
		}},
	} {
		cmd.AddCommand(opts.databaseFlags(&cobra.Command{
			Use: action.use, Short: action.short, Args: oneScheduleName,
			RunE: func(cmd *cobra.Command, args []string) error {
				return opts.withControl(func(c *schedcontrol.Control) error {
					name := args[0]
					if err := action.run(c, cmd, name); err != nil {
						return err
					}
					list, err := c.List(cmd.Context())
					if err != nil {
						return err
					}
					i := slices.IndexFunc(list, func(s schedcontrol.Stored) bool { return s.Name == name })
					if i < 0 { // deleted right after the action
						return fmt.Errorf("scheduler: no schedule named %q", name)
					}
					fmt.Fprintln(cmd.OutOrStdout(), action.said(name, list[i]))
					return nil
				})
			},
		}, schedulesTable))
	}
	return cmd
}

// oneScheduleName accepts one argument, the schedule's name; it says so
// instead of cobra's "accepts 1 arg(s), received 0".
func oneScheduleName(cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		return nil
	case 0:
		return errors.New("pass a schedule name (see postroom schedules list)")
	}
	return fmt.Errorf("pass one schedule name, not %d (see postroom schedules list)", len(args))
}

// withControl opens the database and runs fn on its schedules.
func (o *options) withControl(fn func(c *schedcontrol.Control) error) error {
	db, err := o.open()
	if err != nil {
		return err
	}
	defer store.Close(db)
	c, err := schedcontrol.New(db, o.tables.Schedules)
	if err != nil {
		return err
	}
	return fn(c)
}

func newSchedulesList(opts *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "list", Short: "Every stored schedule with its next and last run", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.withControl(func(c *schedcontrol.Control) error {
				list, err := c.List(cmd.Context())
				if err != nil {
					return err
				}
				return printSchedules(cmd.OutOrStdout(), list, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return opts.databaseFlags(cmd, schedulesTable)
}

func printSchedules(out io.Writer, list []schedcontrol.Stored, asJSON bool) error {
	return printList(out, asJSON, list, []string{"NAME", "SPEC", "NEXT RUN", "LAST RUN", "LAST FIRED BY", "PAUSED"}, func(r schedcontrol.Stored) []string {
		last := "-"
		if r.LastRunAt != nil {
			last = r.LastRunAt.Format(time.RFC3339)
		}
		return []string{r.Name, r.Spec, r.NextRunAt.Format(time.RFC3339), last, r.LastFiredBy, strconv.FormatBool(r.Paused)}
	})
}

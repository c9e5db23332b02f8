package main

import (
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/store"
)

func newDelayed(opts *options) *cobra.Command {
	cmd := &cobra.Command{Use: "delayed", Short: "Messages waiting for a later delivery (bus.DeliverAt) or a delayed retry"}
	var (
		asJSON bool
		limit  int
	)
	list := &cobra.Command{
		Use: "list", Short: "The waiting messages, earliest due first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			rows, err := storeinfo.ListDelayed(cmd.Context(), db, limit)
			if err != nil {
				return err
			}
			return printDelayed(cmd.OutOrStdout(), rows, asJSON)
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	list.Flags().IntVar(&limit, "limit", 100, "the most messages to list")
	cmd.AddCommand(opts.databaseFlags(list))
	return cmd
}

func printDelayed(out io.Writer, rows []storeinfo.Delayed, asJSON bool) error {
	return printList(out, asJSON, rows, []string{"ID", "DUE", "MESSAGE ID", "TOPIC", "RETRY OF GROUP", "RELAYED BY"}, func(r storeinfo.Delayed) []string {
		group, sender := "-", "-"
		if r.TargetGroup != "" {
			group = r.TargetGroup
		}
		if r.RelayedBy != "" {
			sender = r.RelayedBy
		}
		return []string{strconv.FormatInt(r.ID, 10), r.DueAt.Format(time.RFC3339), r.MessageID, r.Topic, group, sender}
	})
}

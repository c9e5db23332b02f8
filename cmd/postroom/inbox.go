package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/store"
)

func newInbox(opts *options) *cobra.Command {
	cmd := &cobra.Command{Use: "inbox", Short: "Look at and purge the inbox (handled message keys)"}
	cmd.AddCommand(newInboxStats(opts), newInboxPurge(opts), newInboxUnresolved(opts), newInboxResolve(opts))
	return cmd
}

type consumerStats struct {
	Consumer   string    `json:"consumer"`
	Rows       int64     `json:"rows"`
	Oldest     time.Time `json:"oldest"`
	Duplicates int64     `json:"duplicates"`
}

func newInboxStats(opts *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Rows, the oldest key and duplicates skipped per consumer (handler)",
		Long: `stats reads the inbox table: per consumer (handler), how many keys it holds,
the oldest, and how many duplicates were skipped for the keys still there
(a purged key takes its count with it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			tables := opts.tables.WithDefaults()
			rows, err := db.WithContext(cmd.Context()).Raw("SELECT consumer, COUNT(*), MIN(received_at), COALESCE(SUM(duplicates), 0) FROM " + tables.Inbox + " GROUP BY consumer ORDER BY consumer").Rows()
			if err != nil {
				return err
			}
			defer rows.Close()
			d, err := dialect.Of(db)
			if err != nil {
				return err
			}
			var stats []consumerStats
			for rows.Next() {
				var s consumerStats
				var oldest any
				if err := rows.Scan(&s.Consumer, &s.Rows, &oldest, &s.Duplicates); err != nil {
					return err
				}
				if s.Oldest, err = d.ParseTime(oldest); err != nil {
					return err
				}
				stats = append(stats, s)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return printStats(cmd.OutOrStdout(), stats, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printStats(out io.Writer, stats []consumerStats, asJSON bool) error {
	if asJSON {
		if stats == nil {
			stats = []consumerStats{}
		}
		return json.NewEncoder(out).Encode(stats)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "CONSUMER\tROWS\tOLDEST\tDUPLICATES")
	for _, s := range stats {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", s.Consumer, s.Rows, s.Oldest.Format(time.RFC3339), s.Duplicates)
	}
	return w.Flush()
}

func newInboxPurge(opts *options) *cobra.Command {
	var olderThan time.Duration
	var (
		batch int
		pause time.Duration
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than 240h",
		Short: "Delete inbox keys and stale watermarks older than a duration, in batches",
		Long: `purge runs the same batched delete as the CleanupStore handler, with a
progress bar on a terminal and a line a second otherwise. Keys younger
than the longest time a message can still be redelivered must stay, or a
redelivery is handled again: keep --older-than above your retry and
redelivery horizon (the bus refuses a shorter retention).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return fmt.Errorf("--older-than must be positive, e.g. 240h")
			}
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			out := cmd.OutOrStdout()
			progress := newPurgeProgress(out, isTerminal(out))
			c, err := handlers.NewCleanup(handlers.CleanupConfig{DB: db, Tables: opts.tables, Logger: quietLogger(), Progress: progress.update})
			if err != nil {
				return err
			}
			m := handlers.CleanupStore{Retention: olderThan, BatchSize: batch, Pause: pause}
			pending, err := c.Pending(cmd.Context(), m)
			if err != nil {
				return err
			}
			tables := opts.tables.WithDefaults()
			progress.pending = map[string]int64{tables.Inbox: pending.Inbox, tables.Watermarks: pending.Watermarks}
			res, err := c.Purge(cmd.Context(), m)
			progress.done()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %d inbox keys and %d watermarks older than %s in %d batches\n",
				res.Inbox, res.Watermarks, res.Cutoff.Format(time.RFC3339), res.Batches)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete rows older than this, e.g. 240h (required)")
	cmd.Flags().IntVar(&batch, "batch", handlers.BatchSizeDefault, "rows per DELETE")
	cmd.Flags().DurationVar(&pause, "pause", 0, "rest between batches; 0 rests as long as the batch took, -1ns runs at full speed")
	return cmd
}

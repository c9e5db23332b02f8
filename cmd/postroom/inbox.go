package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/store"
)

func newInbox(opts *options) *cobra.Command {
	cmd := &cobra.Command{Use: "inbox", Short: "Look at, purge and resolve the inbox (handled message keys)"}
	cmd.AddCommand(newInboxStats(opts), newInboxPurge(opts), newInboxUnresolved(opts), newInboxResolve(opts))
	return cmd
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
			stats, err := storeinfo.InboxSummary(cmd.Context(), db, opts.tables)
			if err != nil {
				return err
			}
			return printStats(cmd.OutOrStdout(), stats, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return opts.databaseFlags(cmd, inboxTable)
}

func printStats(out io.Writer, stats []storeinfo.ConsumerSummary, asJSON bool) error {
	return printList(out, asJSON, stats, []string{"CONSUMER", "ROWS", "OLDEST", "DUPLICATES"}, func(s storeinfo.ConsumerSummary) []string {
		return []string{s.Consumer, strconv.FormatInt(s.Rows, 10), s.Oldest.Format(time.RFC3339), strconv.FormatInt(s.Duplicates, 10)}
	})
}

// purgeHorizon is the redelivery horizon of a bus with the default
// settings, the shortest --older-than purge takes without --force: the
// broker's window (RedeliveryWindow), the in-process retries' backoff, and
// the lease of a handler with external effects, whose claim a copy may
// wait out. It is what bus.New checks InboxRetention against. The command
// cannot see a deployment's own settings.
var purgeHorizon = bus.Config{}.RedeliveryHorizon() + inbox.LeaseDefault

func newInboxPurge(opts *options) *cobra.Command {
	var (
		olderThan time.Duration
		batch     int
		pause     time.Duration
		force     bool
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than 240h",
		Short: "Delete inbox keys, stale watermarks and redelivery counts older than a duration, in batches",
		Long: `purge runs the same batched delete as the CleanupStore handler, with a
progress bar on a terminal and a line a second otherwise.

A key younger than the longest time its message can still be redelivered
still protects against that redelivery: purged, the redelivery is handled
again. purge refuses an --older-than below ` + purgeHorizon.String() + `, the horizon
of a bus with the default settings (the default RedeliveryWindow
and retries, the ` + inbox.LeaseDefault.String() + ` lease of a handler with external effects), unless
--force. It cannot see your endpoints' settings: with a longer
RedeliveryWindow or more retries, keep --older-than above their horizon
yourself (the bus refuses an InboxRetention below it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return fmt.Errorf("--older-than must be positive, e.g. 240h")
			}
			if olderThan < purgeHorizon && !force {
				return fmt.Errorf("%w: --older-than %s would delete keys younger than %s, the redelivery horizon of a bus with the default settings, "+
					"and a redelivery of their messages would be handled again: pass a longer --older-than, or --force once no message can come back",
					idempotency.ErrRetentionTooShort, olderThan, purgeHorizon)
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
			progress.pending = map[string]int64{tables.Inbox: pending.Inbox, tables.Watermarks: pending.Watermarks, dialect.DeliveriesTableDefault: pending.Deliveries}
			res, err := c.Purge(cmd.Context(), m)
			progress.done()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "purged %d inbox keys, %d watermarks and %d redelivery counts older than %s in %d batches\n",
				res.Inbox, res.Watermarks, res.Deliveries, res.Cutoff.Format(time.RFC3339), res.Batches)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete rows older than this, e.g. 240h (required; at least "+purgeHorizon.String()+" without --force)")
	cmd.Flags().IntVar(&batch, "batch", handlers.BatchSizeDefault, "rows per DELETE")
	cmd.Flags().DurationVar(&pause, "pause", 0, "rest between batches; 0 rests as long as the batch took, -1ns runs at full speed")
	cmd.Flags().BoolVar(&force, "force", false, "purge below the redelivery horizon (no message can come back: every endpoint stopped, queues drained)")
	return opts.databaseFlags(cmd, inboxTable, watermarksTable)
}

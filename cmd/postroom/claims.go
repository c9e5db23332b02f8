package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/internal/claims"
	"github.com/postroom/postroom/internal/idempotency"
	"github.com/postroom/postroom/middleware/inbox"
	"github.com/postroom/postroom/store"
)

func newInboxUnresolved(opts *options) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "unresolved",
		Short: "Messages of external-effects handlers whose outcome is unknown (parked, or lease ran out)",
		Long: `unresolved lists the inbox claims of handlers registered with Inbox.ExternalEffects
whose outcome is unknown: "parked" (the message went to the error topic with
reason "outcome unknown") or "processing" with a lease that ran out (its
process stopped mid-call and the message has not come back yet).

Find out in the external system whether the effect happened (look for the
idempotency key), then resolve each one with "postroom inbox resolve".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			list, err := claims.ListUnresolved(cmd.Context(), db, opts.tables.Inbox, time.Now(), limit)
			if err != nil {
				return err
			}
			return printUnresolved(cmd.OutOrStdout(), list, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many, oldest first")
	return opts.databaseFlags(cmd, inboxTable)
}

// unresolvedClaim is an unresolved claim as printed: with its idempotency
// key, which the operator looks for in the external system.
type unresolvedClaim struct {
	claims.Unresolved
	IdempotencyKey string `json:"idempotency_key"`
}

func printUnresolved(out io.Writer, list []claims.Unresolved, asJSON bool) error {
	claims := make([]unresolvedClaim, len(list))
	for i, u := range list {
		claims[i] = unresolvedClaim{u, idempotency.Key(u.Consumer, u.Source, u.MessageID)}
	}
	return printList(out, asJSON, claims, []string{"CONSUMER", "SOURCE", "MESSAGE ID", "STATUS", "ATTEMPTS", "RECEIVED", "IDEMPOTENCY KEY"},
		func(c unresolvedClaim) []string {
			return []string{c.Consumer, c.Source, c.MessageID, c.Status, strconv.Itoa(c.Attempts), c.ReceivedAt.Format(time.RFC3339), c.IdempotencyKey}
		})
}

func newInboxResolve(opts *options) *cobra.Command {
	var source string
	var done, release bool
	var attempts int
	cmd := &cobra.Command{
		Use:   "resolve CONSUMER MESSAGE_ID --source SOURCE (--done | --release) [--attempts N]",
		Short: "Record what happened to a message whose outcome was unknown",
		Long: `resolve records what you found out about an unresolved message (see
"postroom inbox unresolved": CONSUMER is its CONSUMER column,
<endpoint>/<handler>, and --source its SOURCE column, the sending endpoint
for a message sent with postroom):

  --done     the effect did happen: the key is marked done, and a replay of the
             message from the error topic is skipped as a duplicate;
  --release  the effect did not happen: the claim is released, and the next
             copy of the message (replay it from the error topic) runs the
             handler again, with the same idempotency key.

With --attempts (the ATTEMPTS column) it resolves that attempt only: if
the claim has moved on since you looked (someone released it and the next
copy ran the handler again), it resolves nothing and says so.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if done == release {
				return errors.New("pass exactly one of --done (the effect happened) or --release (it did not)")
			}
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			r, word := claims.Happened, "done"
			if release {
				r, word = claims.DidNotHappen, "released"
			}
			key := inbox.Key{Source: source, MessageID: args[1]}
			if cmd.Flags().Changed("attempts") {
				err = claims.ResolveAttempt(cmd.Context(), db, opts.tables.Inbox, args[0], key, attempts, r, time.Now())
			} else {
				err = claims.Resolve(cmd.Context(), db, opts.tables.Inbox, args[0], key, r, time.Now())
			}
			switch {
			case errors.Is(err, claims.ErrNotUnresolved):
				return fmt.Errorf("%w; the consumer is <endpoint>/<handler> and --source the SOURCE column of `postroom inbox unresolved`", err)
			case errors.Is(err, claims.ErrClaimChanged):
				return fmt.Errorf("%w: `postroom inbox unresolved` shows its attempt now", err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: message %s of %s\n", word, args[1], args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&source, "source", "", "the key's source: the SOURCE column of postroom inbox unresolved (the sending endpoint of a message sent with postroom)")
	cmd.Flags().BoolVar(&done, "done", false, "the effect happened")
	cmd.Flags().BoolVar(&release, "release", false, "the effect did not happen: run the message again")
	cmd.Flags().IntVar(&attempts, "attempts", 0, "resolve only this attempt (the ATTEMPTS column of postroom inbox unresolved): nothing if the claim has moved on since")
	return opts.databaseFlags(cmd, inboxTable)
}

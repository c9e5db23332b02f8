package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqpqueue"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
)

// errorOptions are the flags of the errors subcommands.
type errorOptions struct {
	url, topic string
	limit      int
	secrets    *[]string // the broker URL in use goes there, to be redacted from errors
}

func newErrors(opts *options) *cobra.Command {
	o := &errorOptions{secrets: &opts.secrets}
	cmd := &cobra.Command{
		Use:   "errors",
		Short: "List, show, replay and delete the messages in the error topic (RabbitMQ)",
		Long: `errors reads the error topic's queue on RabbitMQ ("<error topic>_postroom_errors"),
where the bus moves a message after its last failed attempt, with the reason,
handler, attempt count and time in its metadata. Listing and showing leave the
messages in place. Replaying sends a message back to the queue of the handler
that failed, with its original ID, and removes it from the error topic: a
handler with an inbox skips it if it was handled since. Deleting removes a
message for good.`,
	}
	cmd.PersistentFlags().StringVar(&o.url, "amqp", "", "RabbitMQ URL, amqp://user:pass@host:5672/ (default: $POSTROOM_AMQP_URL)")
	cmd.PersistentFlags().StringVar(&o.topic, "error-topic", bus.ErrorTopicDefault, "the bus's Config.ErrorTopic")
	cmd.PersistentFlags().IntVar(&o.limit, "limit", 1000, "look at most at this many messages, oldest first")
	cmd.AddCommand(newErrorsList(o), newErrorsShow(o), newErrorsReplay(o), newErrorsDelete(o))
	return cmd
}

func (o *errorOptions) open(cmd *cobra.Command) (*amqpqueue.Queue, error) {
	url := o.url
	if !cmd.Flags().Changed("amqp") {
		url = os.Getenv("POSTROOM_AMQP_URL")
	}
	if url == "" {
		return nil, errors.New("no broker: pass --amqp or set POSTROOM_AMQP_URL (the errors commands read RabbitMQ's error queue; " +
			"on the SQL transport the error topic is a table: use `postroom console --dsn …`)")
	}
	*o.secrets = append(*o.secrets, url)
	q, err := amqpqueue.Open(url, o.topic, transport.ErrorQueueGroup)
	if err != nil {
		return nil, err
	}
	if w := q.DeliveryLimitWarning(); w != "" {
		// On stderr: list --json stays JSON.
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
	return q, nil
}

// failedMessage is one message of the error topic, as printed.
type failedMessage struct {
	ID      string `json:"id"`
	Handler string `json:"handler"`
	// Group is the endpoint group of the handler that failed: it tells
	// apart two endpoints' handlers of one name.
	Group    string            `json:"group"`
	Topic    string            `json:"topic"`
	Attempts int               `json:"attempts,omitempty"` // left out when the metadata has no count
	At       string            `json:"at"`
	Reason   string            `json:"reason"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  string            `json:"payload,omitempty"`
}

func failedOf(msg *message.Message, full bool) failedMessage {
	attempts, _ := strconv.Atoi(msg.Metadata.Get(metadata.ErrorAttempts))
	f := failedMessage{
		ID: msg.UUID, Handler: msg.Metadata.Get(metadata.ErrorHandler), Group: msg.Metadata.Get(metadata.ErrorGroup),
		Topic:    msg.Metadata.Get(metadata.ErrorTopic),
		Attempts: attempts, At: msg.Metadata.Get(metadata.ErrorAt),
		Reason: msg.Metadata.Get(metadata.ErrorReason),
	}
	if full {
		f.Metadata = msg.Metadata
		f.Payload = string(msg.Payload)
		if !utf8.Valid(msg.Payload) {
			f.Payload = fmt.Sprintf("(%d bytes, not UTF-8)", len(msg.Payload))
		}
	}
	return f
}

func newErrorsList(o *errorOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "The messages in the error topic, oldest first; they stay there",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer q.Close()
			held, err := q.Count() // before Browse: the messages it looks at come back to the queue a moment after it
			if err != nil {
				return err
			}
			list := []failedMessage{}
			err = q.Browse(cmd.Context(), o.limit, func(msg *message.Message) (bool, error) {
				list = append(list, failedOf(msg, false))
				return false, nil
			})
			if err != nil {
				return err
			}
			if len(list) == o.limit && held > o.limit {
				// On stderr: list --json stays JSON.
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: listed the first %d of the %d messages in error topic %s (--limit %d)\n", o.limit, held, o.topic, o.limit)
			}
			return printFailed(cmd.OutOrStdout(), list, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printFailed(out io.Writer, list []failedMessage, asJSON bool) error {
	return printList(out, asJSON, list, []string{"ID", "HANDLER", "ENDPOINT GROUP", "ATTEMPTS", "AT", "REASON"}, func(f failedMessage) []string {
		reason := f.Reason
		if len(reason) > 80 {
			reason = strings.ToValidUTF8(reason[:77], "") + "..."
		}
		attempts := "-"
		if f.Attempts != 0 {
			attempts = strconv.Itoa(f.Attempts)
		}
		group := f.Group
		if group == "" {
			group = "-"
		}
		return []string{f.ID, f.Handler, group, attempts, f.At, reason}
	})
}

func newErrorsShow(o *errorOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "One message of the error topic: its reason, metadata and payload (as JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer q.Close()
			var found *failedMessage
			err = q.Browse(cmd.Context(), o.limit, func(msg *message.Message) (bool, error) {
				if found == nil && msg.UUID == args[0] {
					f := failedOf(msg, true)
					found = &f
				}
				return false, nil
			})
			if err != nil {
				return err
			}
			if found == nil {
				return fmt.Errorf("no message %s in the first %d of error topic %s", args[0], o.limit, o.topic)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(found)
		},
	}
}

func newErrorsReplay(o *errorOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "replay (ID... | --all)",
		Short: "Send messages back to the handler that failed, with their original IDs",
		Long: `replay sends each chosen message back to the queue of the handler that failed
(not to every subscriber of its topic), with its original ID and metadata, the
error metadata removed, and then removes it from the error topic, before it
reads the next. A message is replayed at least once: if the command stops
between the two, a later replay sends it again, and a handler with an inbox
skips it as a duplicate. A replay cut off (a dropped connection, Ctrl-C) says
how many it replayed and removed, and which message, if any, was sent but
may still be in the error topic, or may or may not have been sent. It replays
only the messages in the error topic when it starts: one that fails again
meanwhile waits for the next replay.

For a handler with Inbox.ExternalEffects, resolve a parked message first
("postroom inbox resolve ... --release"), or the replay is parked again.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("pass the IDs to replay, or --all")
			}
			q, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer q.Close()
			out := cmd.OutOrStdout()
			replayed, kept := 0, 0
			// sent is printed as replayed only once Browse has removed it,
			// before it reads the next.
			var sent, sentTo string
			removed := func() {
				if sent != "" {
					replayed++
					fmt.Fprintf(out, "replayed %s to %s\n", printable(sent), printable(sentTo))
					sent = ""
				}
			}
			held, err := q.Count() // the messages Browse may look at: those in the queue when it starts
			if err != nil {
				return err
			}
			seen := 0
			err = q.Browse(cmd.Context(), o.limit, func(msg *message.Message) (bool, error) {
				removed()
				seen++
				if !all && !slices.Contains(args, msg.UUID) {
					return false, nil
				}
				queue, err := q.Replay(cmd.Context(), msg)
				if errors.Is(err, amqpqueue.ErrNotReplayable) {
					kept++ // it stays; the others go on
					fmt.Fprintf(out, "kept %s in the error topic: %s\n", printable(msg.UUID), printable(err.Error()))
					return false, nil
				}
				if errors.Is(err, amqpqueue.ErrOutcomeUnknown) {
					fmt.Fprintf(out, "%s: sent or not, unknown: it stays in the error topic, and a later replay sends it again "+
						"(a handler with an inbox skips a repeat)\n", printable(msg.UUID))
				}
				if err != nil {
					return false, err
				}
				sent, sentTo = msg.UUID, queue
				return true, nil
			})
			if errors.Is(err, amqpqueue.ErrNotRemoved) && sent != "" {
				fmt.Fprintf(out, "sent %s to %s, but it may still be in the error topic: then a later replay sends it again "+
					"(a handler with an inbox skips a repeat)\n", printable(sent), printable(sentTo))
				sent = ""
			}
			removed()
			if err != nil {
				fmt.Fprintf(out, "replayed %d and removed them from the error topic before the stop; the rest stay there\n", replayed)
				return err
			}
			if replayed == 0 && kept == 0 {
				return fmt.Errorf("nothing to replay in the first %d of error topic %s", o.limit, o.topic)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d\n", replayed)
			if kept > 0 {
				return fmt.Errorf("%d message(s) cannot be replayed and stay in the error topic (listed above)", kept)
			}
			if all && seen == o.limit && held > o.limit {
				// Stopped at the limit: say so, not leave the rest in silence.
				return fmt.Errorf("replay --all looked at the first %d of the %d messages in error topic %s (--limit %d): run it again for the rest, or raise --limit",
					o.limit, held, o.topic, o.limit)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every message (up to --limit)")
	return cmd
}

func newErrorsDelete(o *errorOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "delete (ID... | --all)",
		Short: "Remove messages from the error topic for good, without handling them",
		Long: `delete removes each chosen message from the error topic: it is not handled,
and nothing keeps a copy (show it first to keep its payload). Every copy of an
ID is deleted (a message moved there by two endpoints' handlers has one copy
each); "" names the messages without an ID (a producer that set none). It
looks only at the messages in the error topic when it starts.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("pass the IDs to delete, or --all")
			}
			q, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer q.Close()
			out := cmd.OutOrStdout()
			deleted := 0
			// taken (even "") is printed once Browse confirmed its removal.
			taken, pending := "", false
			confirm := func() {
				if pending {
					deleted++
					fmt.Fprintf(out, "deleted %s\n", idOrNone(taken))
					pending = false
				}
			}
			err = q.Browse(cmd.Context(), o.limit, func(msg *message.Message) (bool, error) {
				confirm()
				if !all && !slices.Contains(args, msg.UUID) {
					return false, nil
				}
				taken, pending = msg.UUID, true
				return true, nil
			})
			if errors.Is(err, amqpqueue.ErrNotRemoved) && pending {
				fmt.Fprintf(out, "%s may still be in the error topic: the connection dropped as it was removed\n", idOrNone(taken))
				pending = false
			}
			confirm()
			if err != nil {
				fmt.Fprintf(out, "deleted %d before the stop; the rest stay in the error topic\n", deleted)
				return err
			}
			if deleted == 0 {
				return fmt.Errorf("nothing to delete in the first %d of error topic %s", o.limit, o.topic)
			}
			fmt.Fprintf(out, "deleted %d\n", deleted)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every message (up to --limit)")
	return cmd
}

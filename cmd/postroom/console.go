package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/store"
)

func newConsole(opts *options) *cobra.Command {
	var (
		amqpURL, errorTopic, listen, token string
		readOnly                           bool
		limit                              int
		metricsURLs                        []string
		sampleInterval                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: charts, failed messages, unresolved effects, schedules, inbox lookup",
		Long: `console serves a web console for the people on call, from this binary (no
network at run time): what needs attention first; per handler, charts of
the messages handled, duplicates, stale and failed over the last hour; the
failed messages of the error topic (RabbitMQ with --amqp, else the SQL
transport's table in the database) grouped by endpoint group (the
failing handler's subscriber group), handler and the shape of their
reason (IDs and numbers as …), their headers and body, retry and
delete; the unresolved external effects and
their resolution; the schedules with trigger, pause and resume; and a
lookup of whether a message was handled by a consumer.

The charts come from the database (handled: the inbox keys; failed: the
error topic), or, with --metrics, from the Prometheus endpoints of the
running buses (bus.Config.Metrics.Addr), sampled every --sample-interval
from the console's start: every handler, and duplicates and stale too.

It listens on loopback by default. Any other address needs an access token
(--token or $` + console.TokenEnv + `): every request must then carry it, through
the login form's cookie or an "Authorization: Bearer" header. Every action
is a POST with a CSRF token, from the console's own pages. --read-only
removes every action. No page and no log line shows the DSN, the broker
URL or the token. See docs/console.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("token") {
				token = os.Getenv(console.TokenEnv)
			}
			if token != "" {
				opts.secrets = append(opts.secrets, token)
			}
			if err := console.CheckListen(listen, token); err != nil {
				return err
			}
			if !cmd.Flags().Changed("amqp") {
				amqpURL = os.Getenv("POSTROOM_AMQP_URL")
			}
			if amqpURL != "" {
				opts.secrets = append(opts.secrets, amqpURL)
			}
			db, err := opts.open()
			if err != nil {
				return err
			}
			defer store.Close(db)
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			c, err := console.New(console.Config{DB: db, Tables: opts.tables, AMQPURL: amqpURL, ErrorTopic: errorTopic,
				Token: token, ReadOnly: readOnly, Limit: limit, Logger: logger, Secrets: opts.secrets,
				Metrics: metricsURLs, SampleInterval: sampleInterval})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("console: listen on %s: %w", listen, err)
			}
			mode := ""
			if readOnly {
				mode = " (read-only)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "postroom console%s on %s\n", mode, consoleURL(ln.Addr()))
			ctx, stop := context.WithCancel(cmd.Context())
			sampled := make(chan error, 1)
			go func() { sampled <- c.Run(ctx) }()
			err = serve(ctx, ln, c)
			stop()
			return errors.Join(err, <-sampled)
		},
	}
	cmd.Flags().StringVar(&amqpURL, "amqp", "", "RabbitMQ URL for the failed messages, amqp://user:pass@host:5672/ (default: $POSTROOM_AMQP_URL; none: no failed-messages page)")
	cmd.Flags().StringVar(&errorTopic, "error-topic", bus.ErrorTopicDefault, "the bus's Config.ErrorTopic")
	cmd.Flags().StringVar(&listen, "listen", console.ListenDefault, "address to listen on; anything but loopback needs --token")
	cmd.Flags().StringVar(&token, "token", "", "access token every request needs (default: $"+console.TokenEnv+")")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "remove every action: look, change nothing")
	cmd.Flags().IntVar(&limit, "limit", console.LimitDefault, "look at most at this many failed messages and unresolved effects, oldest first")
	cmd.Flags().StringArrayVar(&metricsURLs, "metrics", nil, "a running bus's Prometheus endpoint to chart, http://127.0.0.1:9464/metrics (repeatable; default: the charts come from the database)")
	cmd.Flags().DurationVar(&sampleInterval, "sample-interval", console.SampleIntervalDefault, "how often to read the --metrics endpoints")
	return opts.databaseFlags(cmd, inboxTable, watermarksTable, schedulesTable)
}

// serve serves h on ln until ctx ends, then shuts down within 5 seconds.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdown)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = cmp.Or(err, serveErr)
	}
	return err
}

// consoleURL is the address to open: a listener on every address (0.0.0.0,
// ::) is reached on loopback too, which a browser can open.
func consoleURL(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + a.String() + "/"
	}
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port)) + "/ (listening on every address of this machine)"
}

package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/endpointname"
	"github.com/postroom/postroom/transport/amqp"
)

// route is where one message type travels, as routes prints it.
type route struct {
	// Kind is "command" or "event".
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Endpoint is the endpoint whose handler receives it; "" for an event
	// listed without one.
	Endpoint string `json:"endpoint,omitempty"`
	// Handler is that handler's name (bus.Named, else the message name).
	Handler string `json:"handler,omitempty"`
	// Topic is what a producer publishes to: the SQL transport's table is
	// "watermill_<topic>".
	Topic string `json:"topic"`
	// Exchange is the topic's exchange on RabbitMQ.
	Exchange string `json:"exchange"`
	// Group is the handler's subscriber group (its consumer group on the
	// SQL transport).
	Group string `json:"group,omitempty"`
	// Queue is the handler's queue for the topic on RabbitMQ.
	Queue string `json:"queue,omitempty"`
}

func newRoutes() *cobra.Command {
	var (
		endpoint, handler string
		commands, events  []string
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "routes --endpoint E (--command NAME | --event NAME)...",
		Short: "Where a producer in another language publishes a command or an event, and the handler's queue",
		Long: `routes prints, for message names, the topic a producer that is not postroom
publishes to (the exchange on RabbitMQ, the table "watermill_<topic>" on the
SQL transport) and the group and RabbitMQ queue of the handler of endpoint E
that receives it. It computes them as the bus does (bus.CommandTopic,
bus.EventTopic, bus.GroupOf) and connects to nothing.

A message name is what bus.MessageName returns for the Go type: its
MessageName method, else its import path and type name. A command goes to
one endpoint: --endpoint is required with --command. An event goes to every
endpoint that handles it: without --endpoint only its topic is printed.
--handler is the name the handler was registered with (bus.Named); it
defaults to the message name, and names the handler of one message only.`,
		Example: `  postroom routes --endpoint billing --command shop.PlaceOrder --event shop.OrderPlaced
  postroom routes --endpoint billing --event shop.OrderPlaced --handler audit --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			routes, err := routesOf(endpoint, handler, commands, events)
			if err != nil {
				return err
			}
			return printRoutes(cmd.OutOrStdout(), routes, asJSON)
		},
	}
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the endpoint that handles the messages (bus.Config.Endpoint)")
	cmd.Flags().StringArrayVar(&commands, "command", nil, "a command's message name (repeatable)")
	cmd.Flags().StringArrayVar(&events, "event", nil, "an event's message name (repeatable)")
	cmd.Flags().StringVar(&handler, "handler", "", "the handler's name, bus.Named (default: the message name)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// routesOf computes the routes of commands and events, in that order.
func routesOf(endpoint, handler string, commands, events []string) ([]route, error) {
	var errs []error
	if len(commands)+len(events) == 0 {
		errs = append(errs, errors.New("name at least one --command or --event"))
	}
	if len(commands) > 0 && endpoint == "" {
		errs = append(errs, errors.New("a command goes to one endpoint: pass --endpoint"))
	}
	if handler != "" && len(commands)+len(events) != 1 {
		errs = append(errs, errors.New("--handler names the handler of one message: pass one --command or --event with it"))
	}
	if handler != "" && endpoint == "" {
		errs = append(errs, errors.New("--handler needs the --endpoint it belongs to"))
	}
	if endpoint != "" {
		if err := endpointname.Check(endpoint); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range append(append([]string{}, commands...), events...) {
		if name == "" {
			errs = append(errs, errors.New("a message name is empty"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []route
	add := func(kind, message, topic string) {
		r := route{Kind: kind, Message: message, Topic: topic, Exchange: amqp.ExchangeName(topic)}
		if endpoint != "" {
			r.Endpoint = endpoint
			r.Handler = handler
			if r.Handler == "" {
				r.Handler = message
			}
			r.Group = bus.GroupOf(endpoint, r.Handler)
			r.Queue = amqp.QueueName(topic, r.Group)
		}
		out = append(out, r)
	}
	for _, name := range commands {
		add("command", name, bus.CommandTopic(endpoint, name))
	}
	for _, name := range events {
		add("event", name, bus.EventTopic(name))
	}
	return out, nil
}

func printRoutes(out io.Writer, routes []route, asJSON bool) error {
	return printList(out, asJSON, routes, []string{"KIND", "MESSAGE", "TOPIC", "RABBITMQ EXCHANGE", "HANDLER GROUP", "RABBITMQ QUEUE"}, func(r route) []string {
		return []string{r.Kind, r.Message, r.Topic, r.Exchange, orDash(r.Group), orDash(r.Queue)}
	})
}

package main

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

// Shipment is the message of the routes test.
type Shipment struct{ N int }

func (Shipment) MessageName() string { return "test.Shipment" }

// TestRoutesAreWhereTheBusListens: on RabbitMQ, the queues routes prints
// are the handlers' queues, and a plain AMQP client that publishes to the
// exchanges it prints reaches the handlers, a named one included.
func TestRoutesAreWhereTheBusListens(t *testing.T) {
	url := testenv.RequireAMQP(t)
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	endpoint := testenv.Name("shipping")
	b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: tr, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	var shipped, audited atomic.Int32
	require.NoError(t, bus.Handle(b, func(context.Context, *Shipment) error { shipped.Add(1); return nil }))
	require.NoError(t, bus.Handle(b, func(context.Context, *Shipment) error { audited.Add(1); return nil }, bus.Named("audit")))
	ctx := testbus.Run(t, b)

	out, err := run(t, "routes", "--endpoint", endpoint, "--command", "test.Shipment", "--event", "test.Shipment", "--json")
	require.NoError(t, err)
	var routes []route
	require.NoError(t, json.Unmarshal([]byte(out), &routes))
	require.Len(t, routes, 2)
	out, err = run(t, "routes", "--endpoint", endpoint, "--event", "test.Shipment", "--handler", "audit", "--json")
	require.NoError(t, err)
	var named []route
	require.NoError(t, json.Unmarshal([]byte(out), &named))
	require.Len(t, named, 1)
	require.Equal(t, "audit", named[0].Handler)
	require.Equal(t, routes[1].Exchange, named[0].Exchange, "one exchange per event")
	require.NotEqual(t, routes[1].Queue, named[0].Queue, "a queue per handler")

	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	for _, r := range append(routes, named...) {
		_, err := ch.QueueDeclarePassive(r.Queue, true, false, false, false, nil)
		require.NoError(t, err, "queue %s exists", r.Queue)
	}
	for i, r := range routes { // a command, then an event: each reaches both handlers of the type
		require.NoError(t, ch.PublishWithContext(ctx, r.Exchange, "", false, false, amqp091.Publishing{
			MessageId: testenv.Name("foreign-"), ContentType: "application/json", Body: []byte(`{"N":1}`)}), r.Kind)
		want := int32(i + 1)
		waitUntil(t, func() bool { return shipped.Load() == want && audited.Load() == want })
	}

	printed, err := run(t, "routes", "--endpoint", endpoint, "--command", "test.Shipment", "--event", "test.Other")
	require.NoError(t, err)
	require.Contains(t, printed, "KIND     MESSAGE        TOPIC")
	require.Contains(t, printed, routes[0].Queue)
	require.Contains(t, printed, "event    test.Other     test.Other")
}

func TestRoutesRefusesWhatItCannotAnswer(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"routes"}, "name at least one --command or --event"},
		{[]string{"routes", "--command", "shop.PlaceOrder"}, "a command goes to one endpoint: pass --endpoint"},
		{[]string{"routes", "--endpoint", "billing", "--command", "a", "--event", "b", "--handler", "h"}, "--handler names the handler of one message"},
		{[]string{"routes", "--event", "b", "--handler", "h"}, "--handler needs the --endpoint"},
		{[]string{"routes", "--endpoint", "billing", "--event", ""}, "a message name is empty"},
		{[]string{"routes", "--endpoint", "bil ling", "--event", "b"}, "bus: endpoint \"bil ling\""},
	} {
		_, err := run(t, tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
	out, err := run(t, "routes", "--event", "shop.OrderPlaced")
	require.NoError(t, err)
	require.Contains(t, out, "event  shop.OrderPlaced  shop.OrderPlaced  shop.OrderPlaced   -              -")
}

package bus_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/gochannel"
)

// TestMetricsEndpointMoves scrapes /metrics during a run and finds the
// counters moving.
func TestMetricsEndpointMoves(t *testing.T) {
	db := testenv.SQLite(t)
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: gochannel.New(gochannel.Config{}), DB: db,
		MetricsAddr: "127.0.0.1:0", Logger: testenv.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *CreateInvoice) error { return nil }, bus.WithInbox()))
	start(t, b, "error")
	handled := func() int {
		resp, err := http.Get("http://" + b.MetricsAddr() + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		m := regexp.MustCompile(`postroom_messages_total\{handler="billing.CreateInvoice",event="handled"\} (\d+)`).FindSubmatch(body)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	require.Equal(t, 0, handled())
	for range 3 {
		require.NoError(t, bus.Send(context.Background(), b, &CreateInvoice{OrderID: "o"}))
	}
	waitFor(t, "the counter to move", func() bool { return handled() == 3 })
}

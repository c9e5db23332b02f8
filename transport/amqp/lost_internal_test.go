package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// TestWhichClosesAreALostConnection: only the network and the broker's
// shutdown (or an operator's close) say nothing about the messages in
// flight; any other close may be a message's doing and counts against it.
func TestWhichClosesAreALostConnection(t *testing.T) {
	for _, c := range []struct {
		what string
		e    amqp091.Error
		lost bool
	}{
		{"a read or write failure, a missed heartbeat", amqp091.Error{Code: amqp091.FrameError, Server: false}, true},
		{"the broker shutting down, an operator's close", amqp091.Error{Code: amqp091.ConnectionForced, Server: true}, true},
		{"a frame the broker refused", amqp091.Error{Code: amqp091.FrameError, Server: true}, false},
		{"the broker's internal error", amqp091.Error{Code: amqp091.InternalError, Server: true}, false},
		{"a command the broker found invalid", amqp091.Error{Code: amqp091.CommandInvalid, Server: true}, false},
		{"a protocol error amqp091 found", amqp091.Error{Code: amqp091.SyntaxError, Server: false}, false},
		{"an unexpected frame amqp091 found", amqp091.Error{Code: amqp091.UnexpectedFrame, Server: false}, false},
	} {
		require.Equal(t, c.lost, connectionLost(&c.e), c.what)
	}
}

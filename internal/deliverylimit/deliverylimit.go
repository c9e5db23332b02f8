// Package deliverylimit holds the check of a quorum error queue's
// x-delivery-limit that the RabbitMQ transport runs when a bus declares
// its error queue, and the operator's tools (postroom errors, the console)
// run when they open it.
//
// Every look at the error queue takes its messages and returns them,
// which a quorum queue counts. RabbitMQ 4.0 to 4.2 give a quorum queue
// declared without x-delivery-limit a limit of 20, so twenty looks drop a
// failed message. postroom declares a quorum error queue with the largest
// limit RabbitMQ takes, but a queue declared by an earlier postroom has
// none, and RabbitMQ does not change an existing queue's arguments.
package deliverylimit

import (
	"errors"
	"fmt"
	"math"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Arg is the quorum queue argument of a delivery limit.
const Arg = "x-delivery-limit"

// ErrorQueue is the x-delivery-limit of a quorum error queue: the largest
// RabbitMQ takes, never reached (-1, "no limit" on RabbitMQ 4.x, is a
// limit of 0 on 3.x).
const ErrorQueue = math.MaxInt32

// Warning says what a quorum error queue without x-delivery-limit risks
// and what to do about it.
const Warning = "the error queue has no x-delivery-limit (declared by an earlier postroom); " +
	"on RabbitMQ 4.0 to 4.2 a quorum queue without one drops a failed message after 20 looks at the error queue: " +
	"add a policy with delivery-limit 2147483647 for it, or drain and delete it so that it is declared again"

// Missing reports whether err, of a declare with x-delivery-limit, says
// that the queue exists without one.
func Missing(err error) bool {
	var amqpErr *amqp091.Error
	return errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed &&
		strings.Contains(amqpErr.Reason, "'"+Arg+"'") && strings.Contains(amqpErr.Reason, "current is none")
}

// Check reports whether the existing queue is a quorum queue without an
// x-delivery-limit. It declares the queue on ch as postroom declares a
// quorum error queue (durable, quorum, ErrorQueue), which changes nothing
// on a queue that has these arguments; RabbitMQ refuses it for any other
// (a classic queue, another limit), and only a quorum queue without a
// limit is reported. A refused declare closes ch: pass a channel of its
// own. The queue must exist (check it with a passive declare first): a
// missing one would be declared.
func Check(ch *amqp091.Channel, queue string) (bool, error) {
	_, err := ch.QueueDeclare(queue, true, false, false, false,
		amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum, Arg: int64(ErrorQueue)})
	var amqpErr *amqp091.Error
	switch {
	case err == nil:
		return false, nil
	case Missing(err):
		return true, nil
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed:
		return false, nil // not a quorum queue, or one with a limit of its own
	default:
		return false, fmt.Errorf("check the x-delivery-limit of queue %s: %w", queue, err)
	}
}

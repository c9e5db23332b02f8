package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	sqltransport "github.com/postroom/postroom/transport/sql"
)

// errorTopic is a console over an error topic that a test fills: publish
// moves a message there as the bus does after its last failed attempt.
// A retry sends it back to retryTopic, for the group group. ready, when
// set, counts the messages the error topic holds ready for a read.
// subscribe declares another handler's group on retryTopic, as its bus
// does (RabbitMQ: its queue), and retried counts the retries sent back
// to a group.
type errorTopic struct {
	f                 *fixture
	publish           func(t *testing.T, msg *message.Message)
	retryTopic, group string
	ready             func(t *testing.T) int
	subscribe         func(t *testing.T, group string)
	retried           func(t *testing.T, group string) int
}

// settle waits until the error topic holds n messages ready for a read. A
// quorum queue takes back the messages a read returned (a page of the
// console) a moment after the read's channel is closed; a read meanwhile
// does not see them.
func (e errorTopic) settle(t *testing.T, n int) {
	t.Helper()
	if e.ready == nil {
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	got := e.ready(t)
	for got != n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = e.ready(t)
	}
	require.Equal(t, n, got, "messages ready in the error queue")
}

// fail puts in the error topic what the bus moves there after a last
// failed attempt of test.Charge at at (RFC 3339).
func (e errorTopic) fail(t *testing.T, id, reason, at string) {
	t.Helper()
	msg := message.NewMessage(id, []byte(`{"N":1}`))
	msg.Metadata = message.Metadata{metadata.ErrorHandler: "test.Charge", metadata.ErrorReason: reason,
		metadata.ErrorTopic: e.retryTopic, metadata.ErrorGroup: e.group, metadata.ErrorAt: at}
	e.publish(t, msg)
}

// failedNow is the time of a failure now, as the bus writes it.
func failedNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// errorTopics are the error topics the failed-messages pages read: the SQL
// transport's table on PostgreSQL and MariaDB, and RabbitMQ's error queue,
// classic and quorum (which counts each read in the delivery count of the
// messages it returns). unsupported says why a store has none.
var errorTopics = []struct {
	name        string
	open        func(t *testing.T) errorTopic
	unsupported string
}{
	{name: "postgres", open: func(t *testing.T) errorTopic { return sqlErrorTopic(t, testenv.Postgres(t)) }},
	{name: "mariadb", open: func(t *testing.T) errorTopic { return sqlErrorTopic(t, testenv.MySQL(t)) }},
	{name: "sqlite", unsupported: "the SQL transport needs PostgreSQL or MySQL: the console cannot read the error topic"},
	{name: "rabbitmq", open: func(t *testing.T) errorTopic { return amqpErrorTopic(t, amqp.QueueClassic) }},
	{name: "rabbitmq-quorum", open: func(t *testing.T) errorTopic { return amqpErrorTopic(t, amqp.QueueQuorum) }},
}

func sqlErrorTopic(t *testing.T, db *gorm.DB) errorTopic {
	tr, err := sqltransport.New(sqltransport.Config{DB: db})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	topic := testenv.Name("error_")
	return errorTopic{
		f:          newFixture(t, db, console.Config{ErrorTopic: topic}),
		publish:    func(t *testing.T, msg *message.Message) { require.NoError(t, tr.Publisher().Publish(topic, msg)) },
		retryTopic: "billing.cmd.test.Charge", group: bus.GroupOf("billing", "test.Charge"),
		subscribe: func(*testing.T, string) {}, // a retry goes through the delayed table, to any group
		retried: func(t *testing.T, group string) int {
			var n int
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE target_group = ?", group).Scan(&n).Error)
			return n
		},
	}
}

func amqpErrorTopic(t *testing.T, queues amqp.QueueType) errorTopic {
	tr := amqptest.New(t, amqp.Config{QueueType: queues})
	topic, retryTopic, group := testenv.Name("error_"), testenv.Name("charge_"), bus.GroupOf("billing", "test.Charge")
	subscribe := func(t *testing.T, topic, group string) { // the queue, as a bus declares it
		sub, err := tr.Subscriber(group, 1)
		require.NoError(t, err)
		require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
	}
	subscribe(t, topic, transport.ErrorQueueGroup)
	subscribe(t, retryTopic, group)
	conn, err := amqp091.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	messages := func(t *testing.T, queue string) int {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages
	}
	return errorTopic{
		f:          newFixture(t, testenv.SQLite(t), console.Config{AMQPURL: testenv.AMQPURL(), ErrorTopic: topic}),
		publish:    func(t *testing.T, msg *message.Message) { require.NoError(t, tr.Publisher().Publish(topic, msg)) },
		retryTopic: retryTopic, group: group,
		ready:     func(t *testing.T) int { return messages(t, amqp.QueueName(topic, transport.ErrorQueueGroup)) },
		subscribe: func(t *testing.T, group string) { subscribe(t, retryTopic, group) },
		retried:   func(t *testing.T, group string) int { return messages(t, amqp.QueueName(retryTopic, group)) },
	}
}

var (
	hiddenField = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)
	failedRow   = regexp.MustCompile(`<tr data-id="([^"]+)" data-group="[^"]*">`)
)

// confirm opens the confirmation page of path and returns the form its
// button submits, as a browser sends it.
func (f *fixture) confirm(t *testing.T, path, button string) url.Values {
	t.Helper()
	status, body, _ := f.do(t, "GET", path, nil, nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="confirm">`+button+`</button>`)
	form := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(body, -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	require.NotEmpty(t, form.Get("csrf"))
	return form
}

// failedIDs returns the IDs the failed messages page lists, one per copy.
func (f *fixture) failedIDs(t *testing.T) []string {
	t.Helper()
	_, body, _ := f.do(t, "GET", "/failed", nil, nil)
	var ids []string
	for _, m := range failedRow.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// clear deletes every failed message, confirmed as an operator does.
func (e errorTopic) clear(t *testing.T) {
	t.Helper()
	n := len(e.f.failedIDs(t))
	if n == 0 {
		return
	}
	e.settle(t, n)
	form := e.f.confirm(t, "/failed/confirm?action=delete&all=1", "Delete "+strconv.Itoa(n))
	e.settle(t, n)
	status, body, _ := e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
	require.Equal(t, http.StatusSeeOther, status, body)
	e.settle(t, 0)
	require.Empty(t, e.f.failedIDs(t))
}

// TestFailedActionsTakeOnlyWhatWasConfirmed: a retry or a delete takes the
// messages its confirmation page showed, and no other. A message that
// fails while the operator reads the page ("Delete 1"), though it is in
// the selection (all, the failure group, another copy of the ID), stays
// in the error topic; a second submit of the same form takes nothing. A
// form that names no message takes nothing. A POST that reads the error
// topic again deletes every message of the selection, the one nobody saw
// included.
func TestFailedActionsTakeOnlyWhatWasConfirmed(t *testing.T) {
	for _, tc := range errorTopics {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.unsupported != "" {
				f := newFixture(t, testenv.SQLite(t), console.Config{})
				_, body, _ := f.do(t, "GET", "/failed/confirm?action=delete&all=1", nil, nil)
				require.Contains(t, body, "cannot read the error topic", tc.unsupported)
				require.NotContains(t, body, `id="confirm"`)
				return
			}
			e := tc.open(t)
			failed := func(id, reason string) { e.fail(t, id, reason, failedNow()) }
			for _, action := range []struct{ path, button, done string }{
				{"delete", "Delete", "deleted"},
				{"retry", "Retry", "retried"},
			} {
				for _, sel := range []struct {
					name, query  string
					seen, unseen string // the IDs of the message confirmed and of the one that fails meanwhile
					unseenReason string
				}{
					{"all", "all=1", "seen-1", "unseen-2", "timeout"}, // of another failure group
					{"group", url.Values{"handler": {"test.Charge"}, "reason": {"down"}}.Encode(), "seen-1", "unseen-2", "down"},
					{"id", "id=m-1", "m-1", "m-1", "down"}, // failed again after a retry: a second copy
				} {
					t.Run(action.path+"_"+sel.name, func(t *testing.T) {
						e.clear(t) // what a failed case before left
						failed(sel.seen, "down")
						e.settle(t, 1)
						form := e.f.confirm(t, "/failed/confirm?action="+action.path+"&"+sel.query, action.button+" 1")
						failed(sel.unseen, sel.unseenReason) // while the operator reads the page
						e.settle(t, 2)

						status, body, res := e.f.do(t, "POST", "/failed/"+action.path, form, e.f.origin())
						require.Equal(t, http.StatusSeeOther, status, body)
						e.settle(t, 1) // only the message confirmed is taken
						require.Equal(t, []string{sel.unseen}, e.f.failedIDs(t), "only the message confirmed is taken")
						require.Contains(t, res.Header.Get("Location"), "done="+action.done)
						require.Contains(t, res.Header.Get("Location"), url.QueryEscape("(1; 1 not shown on the confirmation page left in the error topic)"))

						e.settle(t, 1)
						status, body, _ = e.f.do(t, "POST", "/failed/"+action.path, form, e.f.origin())
						require.Equal(t, http.StatusConflict, status, "the same form again")
						require.Contains(t, body, "nothing to do: the 1 message(s)")
						require.Contains(t, body, "1 not shown on the confirmation page stay in the error topic")
						e.settle(t, 1)
						require.Equal(t, []string{sel.unseen}, e.f.failedIDs(t))

						form.Del("copies") // a form from an older page, or one made by hand
						status, body, _ = e.f.do(t, "POST", "/failed/"+action.path, form, e.f.origin())
						require.Equal(t, http.StatusBadRequest, status)
						require.Contains(t, body, "the form names no failed message to take")
						e.settle(t, 1)
						require.Equal(t, []string{sel.unseen}, e.f.failedIDs(t))

						e.settle(t, 1)
						e.clear(t) // confirmed now: taken
					})
				}
			}
			e.settle(t, 0)
			_, body, _ := e.f.do(t, "GET", "/failed/confirm?action=delete&all=1", nil, nil)
			require.Contains(t, body, "nothing to delete: the first 1000 of the error topic ")
			require.NotContains(t, body, `id="confirm"`, "no button that would take nothing")
		})
	}
}

// TestFailedRetryKeepsWhatItCannotRetry: a retry of all takes the messages
// it can send back and keeps, and names, one that names no handler (put in
// the error topic by hand, not moved by a bus). That message must not fail
// the whole retry, leaving nothing retried.
func TestFailedRetryKeepsWhatItCannotRetry(t *testing.T) {
	for _, tc := range errorTopics {
		if tc.unsupported != "" {
			continue // TestFailedActionsTakeOnlyWhatWasConfirmed checks the page says so
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.open(t)
			stray := message.NewMessage("stray-1", []byte(`{"N":1}`))
			stray.Metadata = message.Metadata{metadata.ErrorHandler: "test.Charge", metadata.ErrorReason: "down"}
			e.publish(t, stray)
			failed := message.NewMessage("m-2", []byte(`{"N":2}`))
			failed.Metadata = message.Metadata{metadata.ErrorHandler: "test.Charge", metadata.ErrorReason: "down",
				metadata.ErrorTopic: e.retryTopic, metadata.ErrorGroup: e.group, metadata.ErrorAt: time.Now().UTC().Format(time.RFC3339Nano)}
			e.publish(t, failed)
			e.settle(t, 2)
			form := e.f.confirm(t, "/failed/confirm?action=retry&all=1", "Retry 2")
			e.settle(t, 2)
			status, body, res := e.f.do(t, "POST", "/failed/retry", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			require.Contains(t, res.Header.Get("Location"), url.QueryEscape("(1; 1 cannot be retried and stay in the error topic"))
			e.settle(t, 1)
			require.Equal(t, []string{"stray-1"}, e.f.failedIDs(t))
			e.clear(t)
		})
	}
}

// TestAGroupOfAReasonOfSeveralLinesIsTaken: a browser submits a form's line
// breaks as CRLF (WHATWG's form encoding), whatever the page held, and
// bytes that are not UTF-8 and NUL as U+FFFD (html/template writes NUL so;
// the browser decodes the page so), so a failure group whose reason has
// several lines (errors.Join) or such bytes comes back unequal to itself
// unless the console allows for it: its Delete finds nothing and says the
// messages have gone. The form is posted here as a browser posts it.
func TestAGroupOfAReasonOfSeveralLinesIsTaken(t *testing.T) {
	for _, tc := range errorTopics {
		if tc.unsupported != "" {
			continue
		}
		for _, reason := range []string{"charge: declined\ncard expired", "charge: bad \xff\xfe bytes, NUL \x00 here"} {
			t.Run(tc.name+"/"+strconv.Quote(reason), func(t *testing.T) {
				t.Parallel()
				e := tc.open(t)
				e.fail(t, "m-1", reason, failedNow())
				e.fail(t, "m-2", reason, failedNow())
				e.settle(t, 2)
				query := url.Values{"action": {"delete"}, "handler": {"test.Charge"}, "reason": {reason}}.Encode()
				form := e.f.confirm(t, "/failed/confirm?"+query, "Delete 2")
				for name, values := range form {
					for i, v := range values {
						form[name][i] = strings.ToValidUTF8(strings.ReplaceAll(v, "\n", "\r\n"), "\uFFFD")
					}
				}
				e.settle(t, 2)
				status, body, _ := e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
				require.Equal(t, http.StatusSeeOther, status, body)
				e.settle(t, 0)
				require.Empty(t, e.f.failedIDs(t))
			})
		}
	}
}

// TestReasonsThatNameTheirMessageAreOneGroup: reasons that differ only in
// what names their message (a number, a UUID) are one failure group,
// shown with "…" in its place, and the group's Delete takes them all and
// nothing else. Grouped by the exact reason, 1,000 such failures make
// hundreds of groups.
func TestReasonsThatNameTheirMessageAreOneGroup(t *testing.T) {
	for _, tc := range errorTopics {
		if tc.unsupported != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.open(t)
			for _, m := range [][2]string{ // in this order
				{"m-1", "customer 17 has no VAT number"}, {"m-2", "customer 42 has no VAT number"},
				{"m-3", "customer 0198c7a2-5b1e-7c3d-9f00-1234567890ab has no VAT number"},
				{"m-4", "unexpected status 503"}, {"m-5", "unexpected status 400"},
			} {
				e.fail(t, m[0], m[1], failedNow())
			}
			e.settle(t, 5)
			_, body, _ := e.f.do(t, "GET", "/failed", nil, nil)
			require.Contains(t, body, `<span class="reason">customer … has no VAT number</span> <span class="count">(3)</span>`)
			require.Contains(t, body, `<span class="reason">unexpected status 503</span> <span class="count">(1)</span>`, "a status is not an ID")
			require.Contains(t, body, `<span class="reason">unexpected status 400</span> <span class="count">(1)</span>`)
			require.Contains(t, body, "customer 42 has no VAT number", "each row keeps its own reason")

			take := func(reason, button string) {
				t.Helper()
				e.settle(t, len(e.f.failedIDs(t)))
				query := url.Values{"action": {"delete"}, "handler": {"test.Charge"}, "reason": {reason}}.Encode()
				form := e.f.confirm(t, "/failed/confirm?"+query, button)
				status, body, _ := e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
				require.Equal(t, http.StatusSeeOther, status, body)
			}
			take("customer 17 has no VAT number", "Delete 1") // an exact reason (an older form, a script): that one alone
			e.settle(t, 4)
			take("customer … has no VAT number", "Delete 2")
			e.settle(t, 2)
			require.Equal(t, []string{"m-4", "m-5"}, e.f.failedIDs(t))
		})
	}
}

// TestAnActionTakesAsManyIdenticalCopiesAsItConfirmed: copies alike in ID,
// body and metadata have one digest, so the form counts them; a copy
// alike that failed after the confirmation stays in the error topic. It
// catches an action that takes every copy of a digest it confirmed once,
// which no other test does.
func TestAnActionTakesAsManyIdenticalCopiesAsItConfirmed(t *testing.T) {
	for _, tc := range errorTopics {
		if tc.unsupported != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.open(t)
			at := failedNow()
			publish := func() { e.fail(t, "same-1", "down", at) }
			publish()
			e.settle(t, 1)
			form := e.f.confirm(t, "/failed/confirm?action=delete&id=same-1", "Delete 1")
			publish() // the same again, after the confirmation
			e.settle(t, 2)
			status, body, _ := e.f.do(t, "POST", "/failed/delete", form, e.f.origin())
			require.Equal(t, http.StatusSeeOther, status, body)
			e.settle(t, 1)
			require.Equal(t, []string{"same-1"}, e.f.failedIDs(t), "one copy taken, one left")
		})
	}
}

// Package foreignproducer tests what docs/foreign-producers.md shows: a
// Node.js script (publish.js, with amqplib) that sends a command to a
// postroom endpoint over RabbitMQ, and the SQL statements that send it on
// the SQL transport (insert-postgresql.sql, insert-mysql.sql). Each runs
// against a real bus, whose handler must get the message once.
package foreignproducer

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testbus"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
	wsql "github.com/postroom/postroom/transport/sql"
)

func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// CreateInvoice is the command the script and the statements send.
type CreateInvoice struct {
	OrderID string
	Amount  int
}

func (CreateInvoice) MessageName() string { return "billing.CreateInvoice" }

// The name the script and the statements use: a change here must be made
// there and in the page too.
const messageName = "billing.CreateInvoice"

// handled is what the endpoint's handler got.
type handled struct {
	ID       string
	Metadata map[string]string
	Command  CreateInvoice
}

type endpoint struct {
	b          *bus.Bus
	errorTopic string
	mu         sync.Mutex
	got        []handled
}

func (e *endpoint) handled() []handled {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]handled(nil), e.got...)
}

// start runs an endpoint with one handler of CreateInvoice, with the inbox,
// until the test ends.
func start(t *testing.T, name string, tr transport.Transport, db *gorm.DB, errorTopic string) *endpoint {
	t.Helper()
	b, err := bus.New(bus.Config{Endpoint: name, Transport: tr, DB: db, ErrorTopic: errorTopic, Logger: testenv.Logger(t),
		Retry: bus.RetryPolicy{MaxRetries: 1, InitialBackoff: 10 * time.Millisecond}})
	require.NoError(t, err)
	e := &endpoint{b: b, errorTopic: errorTopic}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, m *CreateInvoice) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.got = append(e.got, handled{bus.MessageID(ctx), maps.Clone(bus.Metadata(ctx)), *m})
		return nil
	}, bus.WithInbox()))
	testbus.Run(t, b)
	return e
}

// waitSettled waits until the endpoint has settled n messages (handled,
// skipped as duplicates, or moved to the error topic), then a little longer
// so that a message handled twice would show.
func waitSettled(t *testing.T, e *endpoint, n uint64) {
	t.Helper()
	c := e.b.Counters()
	settled := func() uint64 { return c.Total(metrics.Handled) + c.Total(metrics.Duplicate) + c.Total(metrics.Failed) }
	require.Eventually(t, func() bool { return settled() >= n }, 30*time.Second, 20*time.Millisecond,
		"settled %d of %d messages", settled(), n)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, n, settled(), "more messages settled than were sent")
}

// readErrors subscribes to the endpoint's error topic from its start.
func readErrors(t *testing.T, tr transport.Transport, topic string) <-chan *message.Message {
	t.Helper()
	sub, err := tr.Subscriber(testenv.Name("errors_"), 1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = sub.Close() })
	return msgs
}

func nextError(t *testing.T, errs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-errs:
		m.Ack()
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("nothing reached the error topic")
		return nil
	}
}

// inCI reports whether the tests run in CI, where nothing may be skipped.
func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// requireNode returns the node command, after checking that `npm ci` has
// installed the script's dependencies. Outside CI a missing node or
// node_modules skips the test, saying what to run; in CI it fails.
func requireNode(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + ": scripts/test.sh installs it (apt-get install nodejs npm; npm ci in examples/foreign-producer)"
		if inCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "amqplib", "package.json")); err != nil {
		missing("examples/foreign-producer/node_modules/amqplib is missing")
	}
	return node
}

// runNode runs publish.js with env added, and returns its output.
func runNode(t *testing.T, node string, env ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "publish.js")
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestNodeOnRabbitMQ runs publish.js twice with one message ID: the
// endpoint's handler gets the command once, with the script's headers as
// metadata. Sent to an endpoint that never ran, the script fails.
func TestNodeOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	node := requireNode(t)
	name := testenv.Name("billing-")
	topic := bus.CommandTopic(name, messageName)
	require.Equal(t, bus.CommandTopic(name, bus.MessageName[CreateInvoice]()), topic)

	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	e := start(t, name, tr, testenv.Postgres(t), name+".error")

	id := uuid.NewString()
	env := []string{"POSTROOM_AMQP_URL=" + url, "TOPIC=" + topic, "MESSAGE_ID=" + id}
	for range 2 { // the second is a duplicate
		stdout, stderr, err := runNode(t, node, env...)
		require.NoError(t, err, "publish.js failed: %s", stderr)
		require.Equal(t, "sent "+id+" to "+topic+"\n", stdout)
	}
	waitSettled(t, e, 2)
	got := e.handled()
	require.Len(t, got, 1, "the handler should get the command once")
	require.Equal(t, id, got[0].ID)
	require.Equal(t, CreateInvoice{OrderID: "order-1", Amount: 120}, got[0].Command)
	require.Equal(t, "webshop", got[0].Metadata[metadata.SourceEndpoint])
	require.Equal(t, messageName, got[0].Metadata[metadata.MessageType])
	require.Equal(t, "1", got[0].Metadata["webshop-attempt"], "a numeric header becomes a decimal string")
	require.Equal(t, "application/json", got[0].Metadata[amqp.MetadataContentType])
	require.Equal(t, uint64(1), e.b.Counters().Total(metrics.Duplicate))

	_, stderr, err := runNode(t, node, "POSTROOM_AMQP_URL="+url, "TOPIC="+bus.CommandTopic(testenv.Name("nobody-"), messageName))
	require.Error(t, err, "a command to an endpoint that never ran must fail")
	require.Contains(t, stderr, "NOT_FOUND - no exchange")
}

// TestSQLInsertOnPostgreSQL and TestSQLInsertOnMariaDB run the page's
// INSERT statement against an endpoint "billing" on the SQL transport (in
// a database of the test's own): its handler gets the command once. Rows
// without an ID, with a payload that is not JSON or with metadata that is
// not a JSON object go to the error topic with the reason, and do not hold
// up the rows behind them; metadata values that are not strings arrive as
// their JSON text.
func TestSQLInsertOnPostgreSQL(t *testing.T) {
	t.Parallel()
	testSQLInsert(t, testenv.Postgres(t), "insert-postgresql.sql",
		`INSERT INTO "watermill_billing.cmd.billing.CreateInvoice" (uuid, payload, metadata, transaction_id) VALUES (?, convert_to(?, 'UTF8'), ?, pg_current_xact_id())`)
}

func TestSQLInsertOnMariaDB(t *testing.T) {
	t.Parallel()
	testSQLInsert(t, testenv.MySQL(t), "insert-mysql.sql",
		"INSERT INTO `watermill_billing.cmd.billing.CreateInvoice` (uuid, payload, metadata) VALUES (?, ?, ?)")
}

func testSQLInsert(t *testing.T, db *gorm.DB, file, insert string) {
	t.Helper()
	statement, err := os.ReadFile(file)
	require.NoError(t, err)
	tr, err := wsql.New(wsql.Config{DB: db, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	e := start(t, "billing", tr, db, "error")
	errs := readErrors(t, tr, e.errorTopic)
	require.Equal(t, "billing.cmd.billing.CreateInvoice", bus.CommandTopic("billing", messageName), "the statements' table")

	require.NoError(t, db.Exec(string(statement)).Error)
	waitSettled(t, e, 1)
	got := e.handled()
	require.Len(t, got, 1)
	require.NoError(t, uuid.Validate(got[0].ID), "the message ID is the uuid column")
	require.Equal(t, CreateInvoice{OrderID: "order-1", Amount: 120}, got[0].Command)
	require.Equal(t, "webshop", got[0].Metadata[metadata.SourceEndpoint])

	meta := `{"postroom-message-type": "billing.CreateInvoice"}`
	for _, bad := range []struct{ id, payload, meta, reason string }{
		{"", `{"OrderID": "order-2", "Amount": 1}`, meta, "message ID is empty"},
		{"not-json", `<invoice/>`, meta, "malformed"},
		{"not-an-object", `{"OrderID": "order-2", "Amount": 1}`, `["attempt", 1]`, "metadata is not a JSON object"},
	} {
		require.NoError(t, db.Exec(insert, bad.id, bad.payload, bad.meta).Error)
		failed := nextError(t, errs)
		require.Equal(t, bad.id, failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), bad.reason)
	}
	require.NoError(t, db.Exec(insert, "after-the-bad-ones", `{"OrderID": "order-3", "Amount": 3}`,
		`{"postroom-message-type": "billing.CreateInvoice", "attempt": 1, "retried": false, "note": null}`).Error)
	waitSettled(t, e, 5)
	got = e.handled()
	require.Len(t, got, 2)
	require.Equal(t, "after-the-bad-ones", got[1].ID)
	require.Equal(t, "1", got[1].Metadata["attempt"], "a number is its JSON text")
	require.Equal(t, "false", got[1].Metadata["retried"])
	require.Equal(t, "", got[1].Metadata["note"])
}

// TestThePageShowsTheseFiles: docs/foreign-producers.md shows each file as
// it is (internal/docstest checks the same through its markers).
func TestThePageShowsTheseFiles(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "foreign-producers.md"))
	require.NoError(t, err)
	var errs []error
	for _, f := range []string{"publish.js", "insert-postgresql.sql", "insert-mysql.sql"} {
		content, err := os.ReadFile(f)
		require.NoError(t, err)
		if !strings.Contains(string(page), "\n"+string(content)+"```\n") {
			errs = append(errs, errors.New(f+" is not shown as it is: copy it into its block again"))
		}
	}
	// The names in the page's `postroom routes` output are the bus's.
	group := bus.GroupOf("billing", messageName)
	for _, name := range []string{bus.CommandTopic("billing", messageName), group,
		amqp.QueueName(bus.CommandTopic("billing", messageName), group),
		amqp.QueueName(bus.EventTopic("billing.InvoiceCreated"), bus.GroupOf("billing", "billing.InvoiceCreated"))} {
		if !strings.Contains(string(page), " "+name+"\n") && !strings.Contains(string(page), " "+name+" ") {
			errs = append(errs, errors.New("the page's routes do not show "+name))
		}
	}
	require.NoError(t, errors.Join(errs...))
}

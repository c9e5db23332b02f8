package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/console"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	sqltransport "github.com/postroom/postroom/transport/sql"
)

// TestFailedOnTheSQLTransport: without a broker, the console reads the
// error topic's table of the SQL transport in its database: the overview
// counts and charts the failed messages, the page lists them; a retry
// moves a message to the delayed table, due now, for the failing
// handler's group alone, without its error metadata; a delete removes it.
func TestFailedOnTheSQLTransport(t *testing.T) {
	for _, store := range testenv.Databases {
		t.Run(store.Name, func(t *testing.T) {
			db := store.Open(t)
			if store.Name == "sqlite" { // the SQL transport needs PostgreSQL or MySQL: no failed messages page
				f := newFixture(t, db, console.Config{})
				_, body, _ := f.do(t, "GET", "/", nil, nil)
				require.NotContains(t, body, `href="/failed"`)
				_, body, _ = f.do(t, "GET", "/failed", nil, nil)
				require.Contains(t, body, "cannot read the error topic")
				return
			}
			tr, err := sqltransport.New(sqltransport.Config{DB: db})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, tr.Close()) })
			errorTopic := testenv.Name("error_")
			group := bus.GroupOf("billing", "test.Charge")
			at := time.Now().UTC().Add(-2 * time.Minute)
			for _, id := range []string{"m-1", "m-2"} {
				msg := message.NewMessage(id, []byte(`{"N":1}`))
				msg.Metadata = message.Metadata{metadata.MessageType: "test.Charge", metadata.ErrorHandler: "test.Charge",
					metadata.ErrorReason: "tax service down", metadata.ErrorTopic: "billing.cmd.test.Charge", metadata.ErrorGroup: group,
					metadata.ErrorAttempts: "3", metadata.ErrorAt: at.Format(time.RFC3339Nano), metadata.DelayedRetries: "3"}
				require.NoError(t, tr.Publisher().Publish(errorTopic, msg))
			}
			f := newFixture(t, db, console.Config{ErrorTopic: errorTopic})
			d := `postroom_delayed WHERE message_id = 'm-1'`

			_, body, _ := f.do(t, "GET", "/", nil, nil)
			require.Contains(t, body, "2 failed messages in the error topic "+errorTopic+" (1 failure group)")
			require.Contains(t, body, `href="/failed"`, "the failed messages page is in the menu")
			require.Equal(t, "2", total(t, body, "test.Charge", "failed"), "charted by when they failed")
			_, body, _ = f.do(t, "GET", "/failed", nil, nil)
			require.Contains(t, body, "table <code>watermill_"+errorTopic+"</code>")
			require.Contains(t, body, `data-id="m-1"`)
			require.Contains(t, body, "tax service down")
			_, body, _ = f.do(t, "GET", "/failed/message?id=m-2", nil, nil)
			require.Contains(t, body, `&#34;N&#34;: 1`, "the body, indented")

			_, body, _ = f.do(t, "GET", "/failed/confirm?action=retry&id=m-1", nil, nil)
			require.Contains(t, body, "Retry message m-1: 1 message(s)")
			status, _, res := f.do(t, "POST", "/failed/retry", f.confirm(t, "/failed/confirm?action=retry&id=m-1", "Retry 1"), f.origin())
			require.Equal(t, http.StatusSeeOther, status)
			require.Contains(t, res.Header.Get("Location"), "done=retried")
			var delayed []struct {
				Topic, TargetGroup, Metadata string
				DueAt                        time.Time
			}
			require.NoError(t, db.Raw("SELECT topic, target_group, metadata, due_at FROM "+d).Scan(&delayed).Error)
			require.Len(t, delayed, 1, "retried through the delayed table")
			require.Equal(t, "billing.cmd.test.Charge", delayed[0].Topic)
			require.Equal(t, group, delayed[0].TargetGroup, "for the failing handler alone")
			require.WithinDuration(t, time.Now(), delayed[0].DueAt, time.Minute, "due now")
			var md map[string]string
			require.NoError(t, json.Unmarshal([]byte(delayed[0].Metadata), &md))
			require.Equal(t, "test.Charge", md[metadata.MessageType])
			require.NotContains(t, md, metadata.ErrorReason)
			require.NotContains(t, md, metadata.DelayedRetries, "a new round of delayed retries")
			require.Equal(t, at.Format(time.RFC3339Nano), md[metadata.Replayed])

			_, body, _ = f.do(t, "GET", "/failed", nil, nil)
			require.NotContains(t, body, `data-id="m-1"`, "gone from the error topic")
			status, _, _ = f.do(t, "POST", "/failed/delete", f.confirm(t, "/failed/confirm?action=delete&id=m-2", "Delete 1"), f.origin())
			require.Equal(t, http.StatusSeeOther, status)
			_, body, _ = f.do(t, "GET", "/failed", nil, nil)
			require.Contains(t, body, "No failed messages.")
			var n int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE message_id = 'm-2'").Scan(&n).Error)
			require.Zero(t, n, "a deleted message is not retried")
		})
	}
}

// TestARetryOnTheSQLTransportIsOneTransaction on PostgreSQL and MariaDB: a
// retry of several messages on the SQL transport writes each to the
// delayed table and takes it from the error topic in one transaction, so a
// message the delayed table refuses (its topic longer than the column)
// stops the action with nothing retried: the message before it is neither
// in the delayed table nor gone from the error topic. (It takes MariaDB's
// strict sql_mode, its default since 10.2.4, which refuses a value too
// long for its column instead of cutting it.) It catches a retry written
// outside that transaction, which would send the first message now and
// again at the next retry, and which no other test catches.
func TestARetryOnTheSQLTransportIsOneTransaction(t *testing.T) {
	for _, store := range testenv.Databases {
		if store.Name == "sqlite" { // no SQL transport
			continue
		}
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			db := store.Open(t)
			tr, err := sqltransport.New(sqltransport.Config{DB: db})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, tr.Close()) })
			errorTopic := testenv.Name("error_")
			for i, topic := range []string{"billing.cmd.test.Charge", strings.Repeat("t", 300)} { // in this order
				msg := message.NewMessage(fmt.Sprintf("one-tx-%d", i+1), []byte(`{"N":1}`))
				msg.Metadata = message.Metadata{metadata.MessageType: "test.Charge", metadata.ErrorHandler: "test.Charge",
					metadata.ErrorReason: "tax service down", metadata.ErrorTopic: topic, metadata.ErrorGroup: bus.GroupOf("billing", "test.Charge"),
					metadata.ErrorAt: time.Now().UTC().Format(time.RFC3339Nano)}
				require.NoError(t, tr.Publisher().Publish(errorTopic, msg))
			}
			f := newFixture(t, db, console.Config{ErrorTopic: errorTopic})
			status, body, _ := f.do(t, "POST", "/failed/retry", f.confirm(t, "/failed/confirm?action=retry&all=1", "Retry 2"), f.origin())
			require.Equal(t, http.StatusConflict, status)
			require.Contains(t, body, "nothing was retried (the action is one transaction, rolled back)")
			var delayed int64
			require.NoError(t, db.Raw("SELECT COUNT(*) FROM postroom_delayed WHERE message_id LIKE 'one-tx-%'").Scan(&delayed).Error)
			require.Zero(t, delayed, "nothing retried")
			require.ElementsMatch(t, []string{"one-tx-1", "one-tx-2"}, f.failedIDs(t), "both still in the error topic")
		})
	}
}

package bus_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/middleware/unitofwork"
)

type ConfBadInbox struct{ N int }

func (ConfBadInbox) MessageName() string { return "conf.BadInbox" }

type ConfBadStale struct{ N int }

func (ConfBadStale) MessageName() string { return "conf.BadStale" }

type ConfBadExternal struct{ N int }

func (ConfBadExternal) MessageName() string { return "conf.BadExternal" }

type ConfBadBatch struct{ N int }

func (ConfBadBatch) MessageName() string { return "conf.BadBatch" }

// checkBadInput: input no attempt can handle, from a producer that is not
// postroom, goes to the error topic at once (one attempt) with its reason,
// before any key, watermark or claim is written, and the handler never
// runs; the good messages sent after it are applied once. For the inbox,
// the stale check, the external-effects mode and WithBatch. Before it was
// checked on four bus setups only (TestBusScenarios); this runs it on
// every store × transport.
func checkBadInput(t *testing.T, c *confCase) {
	errs := errorQueue(t, c)
	b := newConfBus(t, c, nil)
	rec := func(consumer string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return unitofwork.Tx(ctx).Exec("INSERT INTO "+c.effects+" (consumer, id) VALUES (?, ?)", consumer, bus.MessageID(ctx)).Error
		}
	}
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *ConfBadInbox) error { return rec("inbox")(ctx) }, bus.WithInbox()))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *ConfBadStale) error { return rec("stale")(ctx) }, bus.WithInbox(), bus.WithStale()))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *ConfBadExternal) error { return rec("external")(ctx) },
		bus.WithInbox(bus.Inbox{ExternalEffects: &bus.ExternalEffects{}})))
	require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *ConfBadBatch) error { return rec("batch")(ctx) },
		bus.WithInbox(), bus.WithBatch(4, 50*time.Millisecond)))
	run(t, b)
	pub := b.Transport().Publisher()
	send := func(name string, id string, payload string, meta map[string]string) {
		t.Helper()
		msg := message.NewMessage(id, []byte(payload))
		for k, v := range meta {
			msg.Metadata.Set(k, v)
		}
		require.NoError(t, pub.Publish(bus.EventTopic(name), msg))
	}
	version := func(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }
	typed := func(name string) map[string]string { return map[string]string{metadata.MessageType: name} }
	stale := func(entity, v string) map[string]string {
		return map[string]string{metadata.MessageType: "conf.BadStale", metadata.EntityID: entity, metadata.Version: v}
	}

	type bad struct {
		handler, name, id, payload string
		meta                       map[string]string
		reason                     string // a regular expression
	}
	now := time.Now()
	cases := []bad{
		{"conf.BadInbox", "conf.BadInbox", uuid.NewString(), "{not json", typed("conf.BadInbox"), `malformed conf\.BadInbox payload`},
		{"conf.BadInbox", "conf.BadInbox", uuid.NewString(), " null\n", typed("conf.BadInbox"), `payload is JSON null`},
		{"conf.BadInbox", "conf.BadInbox", uuid.NewString(), "", typed("conf.BadInbox"), `malformed conf\.BadInbox payload: it is empty`},
		{"conf.BadInbox", "conf.BadInbox", uuid.NewString(), "{\"N\":1,\"Note\":\"caf\xe9\"}", typed("conf.BadInbox"), `payload is not valid UTF-8`},
		{"conf.BadInbox", "conf.BadInbox", uuid.NewString(), `{"N":1}`, typed(strings.Repeat("t", 300)), `unknown message type`},
		{"conf.BadInbox", "conf.BadInbox", "", `{"N":1}`, typed("conf.BadInbox"), `message ID is empty|message has no ID`},
		{"conf.BadStale", "conf.BadStale", uuid.NewString(), `{"N":1}`, stale("e-1", "yesterday"), `version "yesterday" is not an RFC 3339 timestamp`},
		{"conf.BadStale", "conf.BadStale", uuid.NewString(), `{"N":1}`, stale("", version(now)), `entity ID is missing`},
		{"conf.BadStale", "conf.BadStale", uuid.NewString(), `{"N":1}`, stale("e-1", ""), `version is missing`},
		{"conf.BadStale", "conf.BadStale", uuid.NewString(), `{"N":1}`, stale("e-1", version(now.Add(24*time.Hour))), `in the future`},
		{"conf.BadStale", "conf.BadStale", uuid.NewString(), "{not json", stale("e-1", version(now)), `malformed conf\.BadStale payload`},
		{"conf.BadExternal", "conf.BadExternal", uuid.NewString(), "{not json", typed("conf.BadExternal"), `malformed conf\.BadExternal payload`},
		{"conf.BadBatch", "conf.BadBatch", uuid.NewString(), "{not json", typed("conf.BadBatch"), `malformed conf\.BadBatch payload`},
	}
	for _, bc := range cases {
		send(bc.name, bc.id, bc.payload, bc.meta)
	}
	// Good messages behind the bad ones, one per handler.
	want := map[string]int{}
	for _, g := range []struct{ name, consumer string }{
		{"conf.BadInbox", "inbox"}, {"conf.BadStale", "stale"}, {"conf.BadExternal", "external"}, {"conf.BadBatch", "batch"},
	} {
		id := uuid.NewString()
		want[g.consumer+" "+id] = 1
		meta := typed(g.name)
		if g.name == "conf.BadStale" {
			meta = stale("e-2", version(now))
		}
		send(g.name, id, `{"N":2}`, meta)
	}

	seen := map[int]bool{} // the cases that reached the error topic
	deadline := time.After(60 * time.Second)
	for len(seen) < len(cases) {
		select {
		case failed := <-errs:
			failed.Ack()
			handler, reason := failed.Metadata.Get(metadata.ErrorHandler), failed.Metadata.Get(metadata.ErrorReason)
			matched := false
			for i, bc := range cases {
				if !seen[i] && handler == bc.handler && regexp.MustCompile(bc.reason).MatchString(reason) {
					seen[i], matched = true, true
					require.LessOrEqual(t, bus.ErrorAttempts(failed), 1, "%s: not retried (0: refused before any attempt, by the transport)", reason)
					require.NotContains(t, reason, "outcome unknown", "the handler never ran: nothing to park")
					break
				}
			}
			require.True(t, matched, "an unexpected failure: handler %q, reason %q", handler, reason)
		case <-deadline:
			var missing []string
			for i, bc := range cases {
				if !seen[i] {
					missing = append(missing, bc.handler+": "+bc.reason)
				}
			}
			t.Fatalf("bad input that did not reach the error topic: %v", missing)
		}
	}
	waitFor(t, "the good messages", func() bool { return len(effects(t, c)) == len(want) })
	require.Equal(t, want, effects(t, c), "only the good messages were applied, once each")

	var ids []string
	for _, bc := range cases {
		if bc.id != "" {
			ids = append(ids, bc.id)
		}
	}
	var keys, marks int64
	require.NoError(t, c.db.Raw("SELECT COUNT(*) FROM postroom_inbox WHERE message_id IN ?", ids).Scan(&keys).Error)
	require.Zero(t, keys, "no key, claim or parked row for bad input")
	require.NoError(t, c.db.Raw("SELECT COUNT(*) FROM postroom_stale_watermarks WHERE entity_id <> ?", "e-2").Scan(&marks).Error)
	require.Zero(t, marks, "no watermark for bad input")
	for _, h := range []string{"conf.BadInbox", "conf.BadStale", "conf.BadExternal", "conf.BadBatch"} {
		// Counted once the delivery settles, a moment after its commit.
		waitFor(t, h+" to count its good message", func() bool { return b.Counters().Get(h, metrics.Handled) >= 1 })
		require.EqualValues(t, 1, b.Counters().Get(h, metrics.Handled), "%s handled its good message once", h)
	}
}

package bus_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/transport"
	"github.com/postroom/postroom/transport/amqp"
)

// paymentAPI is the external system of the tests, on loopback: it counts
// calls and applies each idempotency key once, as a payment provider does.
type paymentAPI struct {
	mu      sync.Mutex
	keys    []string
	applied map[string]int
	// during runs during call n, before it is applied; false drops the call.
	during func(n int, r *http.Request) bool
}

func (a *paymentAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	_, _ = io.ReadAll(r.Body) // then the server notices a client that goes away
	a.mu.Lock()
	a.keys = append(a.keys, key)
	n := len(a.keys)
	a.mu.Unlock()
	if a.during != nil && !a.during(n, r) {
		return
	}
	a.mu.Lock()
	a.applied[key]++
	a.mu.Unlock()
}

func (a *paymentAPI) calls() ([]string, map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	applied := map[string]int{}
	for k, v := range a.applied {
		applied[k] = min(v, 1) // the provider applies a key once
	}
	return append([]string(nil), a.keys...), applied
}

func externalChildEnv(api, policy, errorTopic string) []string {
	return []string{childAPI + "=" + api, childPolicy + "=" + policy, childErrorTopic + "=" + errorTopic}
}

// TestExternalEffectsWhenTheProcessDiesMidCall: the handler calls a payment
// API, and its process is SIGKILLed during the call. After a restart, the
// transport redelivers the message. With Park it lands in the error topic
// as "outcome unknown" and the API saw one call; with Retry the API sees
// the same idempotency key on every call and applies it once. On every
// store × transport that reaches across processes.
func TestExternalEffectsWhenTheProcessDiesMidCall(t *testing.T) {
	for _, combo := range processCombos {
		for _, policy := range []string{"park", "retry"} {
			t.Run(combo.String()+"/"+policy, func(t *testing.T) {
				externalDiesMidCall(t, combo, policy)
			})
		}
	}
}

// externalDiesMidCall is TestExternalEffectsWhenTheProcessDiesMidCall on one
// store × transport with one policy.
func externalDiesMidCall(t *testing.T, combo processCombo, policy string) {
	p := newProcessSetupOn(t, combo).withSender(t)
	errorTopic := testenv.Name("error_")
	if combo.transport == "amqp" {
		deleteErrorQueue(t, errorTopic)
	}
	var victim atomic.Pointer[consumer]
	api := &paymentAPI{applied: map[string]int{}, during: func(n int, r *http.Request) bool {
		if n > 1 {
			return true
		}
		_ = victim.Load().cmd.Process.Signal(syscall.SIGKILL) // mid-call
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return false
	}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	env := externalChildEnv(srv.URL, policy, errorTopic)

	first := p.start(t, "external", 0, env...)
	victim.Store(first)
	require.NoError(t, bus.Send(context.Background(), p.sender, &Charge{N: 1}, bus.To(p.endpoint), bus.WithMessageID("charge-1")))
	err := first.cmd.Wait()
	status, ok := first.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "killed mid-call: %v", err)

	second := p.start(t, "external", 0, env...)
	var row struct {
		Status   string
		Attempts int
	}
	readRow := func() {
		require.NoError(t, p.db.Raw("SELECT status, attempts FROM postroom_inbox WHERE message_id = 'charge-1'").Scan(&row).Error)
	}
	if policy == "park" {
		failed := p.readErrorTopic(t, errorTopic)
		require.Equal(t, "charge-1", failed.UUID)
		require.Contains(t, failed.Metadata.Get(metadata.ErrorReason), "outcome unknown")
		keys, applied := api.calls()
		require.Len(t, keys, 1, "nobody called again")
		require.Empty(t, applied)
		readRow()
		require.Equal(t, "parked", row.Status)
	} else {
		waitFor(t, "the retried call", func() bool { _, applied := api.calls(); return len(applied) == 1 })
		waitFor(t, "the done mark", func() bool { readRow(); return row.Status == "done" })
		keys, applied := api.calls()
		require.Len(t, keys, 2)
		require.Equal(t, keys[0], keys[1], "one idempotency key on every call")
		require.Equal(t, map[string]int{keys[0]: 1}, applied)
		require.Equal(t, 2, row.Attempts)
	}
	second.stop(t)
}

// TestExternalEffectsTwoCopiesOneCall: a message published twice reaches
// two subscriptions at once; the copy that finds the first one's live claim
// waits for it and is acked as a duplicate: one call. On every store ×
// transport that reaches across processes (the SQL transport hands one
// group's messages out one at a time, so there the second copy comes after
// the first's call and finds its done mark).
func TestExternalEffectsTwoCopiesOneCall(t *testing.T) {
	for _, combo := range processCombos {
		t.Run(combo.String(), func(t *testing.T) {
			externalTwoCopies(t, combo)
		})
	}
}

// externalTwoCopies is TestExternalEffectsTwoCopiesOneCall on one store ×
// transport.
func externalTwoCopies(t *testing.T, combo processCombo) {
	p := newProcessSetupOn(t, combo).withSender(t)
	api := &paymentAPI{applied: map[string]int{}, during: func(int, *http.Request) bool {
		time.Sleep(time.Second) // a slow provider: the second copy arrives meanwhile
		return true
	}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	errorTopic := testenv.Name("error_")
	if combo.transport == "amqp" {
		deleteErrorQueue(t, errorTopic)
	}
	c := p.start(t, "external", 0, externalChildEnv(srv.URL, "park", errorTopic)...)
	for range 2 {
		require.NoError(t, bus.Send(context.Background(), p.sender, &Charge{N: 2}, bus.To(p.endpoint), bus.WithMessageID("charge-2")))
	}
	waitFor(t, "the call", func() bool { _, applied := api.calls(); return len(applied) == 1 })
	time.Sleep(2 * time.Second) // room for a wrong second call
	handled, duplicates := c.stop(t)
	keys, _ := api.calls()
	require.Len(t, keys, 1)
	require.Equal(t, 1, handled)
	require.Equal(t, 1, duplicates)
}

// readErrorTopic returns the first message of the error topic, read as
// the error queue's group on the setup's transport.
func (p processSetup) readErrorTopic(t *testing.T, errorTopic string) *message.Message {
	t.Helper()
	return firstOfErrorTopic(t, p.newTransport(t), errorTopic)
}

// readErrorQueue returns the first message of the error topic's queue.
func readErrorQueue(t *testing.T, url, errorTopic string) *message.Message {
	t.Helper()
	tr, err := amqp.New(amqp.Config{URL: url})
	require.NoError(t, err)
	amqptest.Cleanup(t, tr)
	defer tr.Close()
	return firstOfErrorTopic(t, tr, errorTopic)
}

// firstOfErrorTopic reads the error topic on tr as the error queue's
// group and returns its first message, acked.
func firstOfErrorTopic(t *testing.T, tr transport.Transport, errorTopic string) *message.Message {
	t.Helper()
	sub, err := tr.Subscriber(transport.ErrorQueueGroup, 1)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	msgs, err := sub.Subscribe(ctx, errorTopic)
	require.NoError(t, err)
	select {
	case m, ok := <-msgs:
		require.True(t, ok, "the error topic's subscription ended")
		m.Ack()
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("nothing reached the error topic")
		return nil
	}
}

package bus_test

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/amqptest"
	"github.com/postroom/postroom/internal/testenv"
)

var faultOutage = flag.Bool("fault.outage", false, "run TestBrokerOutageOfAMinute, which cuts its consumer processes off RabbitMQ for about 50 s through a proxy of its own (the shared broker is not touched; scripts/test.sh runs it beside the MariaDB fault test)")

// TestBrokerOutageOfAMinute: three consumer processes reach RabbitMQ
// through a proxy of the test's own, and each handler sends an event
// through the outbox to a downstream endpoint. Under a steady stream (sent
// straight to the broker, as another service would), the proxy first
// closes every connection and refuses new ones for 25 s (the broker is
// down), then, after the consumers are back, holds every byte in flight
// for 25 s without closing anything (a broker that stops answering: only
// the heartbeats tell). With the default retry policy: 0 in the error
// topic, every message handled once, every event once downstream. The
// in-memory proxy touches no other test's connections; it runs with
// -fault.outage (scripts/test.sh does) because it lasts about 90 s.
func TestBrokerOutageOfAMinute(t *testing.T) {
	if !*faultOutage {
		t.Skip("cuts its consumers off RabbitMQ for about 50 s: run with -fault.outage, as scripts/test.sh does")
	}
	p := newProcessSetup(t).withSender(t)
	auditErrors := testenv.Name("error_")
	p.startDownstream(t, auditErrors)

	proxy, proxied := amqptest.NewProxy(t)
	errorTopic := testenv.Name("error_")
	deleteErrorQueue(t, errorTopic)
	env := []string{childDefault + "=1", childErrors + "=" + errorTopic, childOutbox + "=1"}
	var consumers []*consumer
	for range 3 {
		consumers = append(consumers, startChild(t, "consumer", p.dsn, proxied, p.endpoint, 0, env...))
	}

	const messages = 2000 // one every 40 ms: 80 s of steady load around the outages
	sent := p.steadyStream(t, messages)
	time.Sleep(5 * time.Second)
	handledBy := func() (effects, events int64) {
		_, effects = p.effects(t)
		_, events, err := p.events(messages)
		require.NoError(t, err)
		return effects, events
	}

	effects, _ := handledBy()
	require.Positive(t, effects, "the consumers handled messages before the outage")
	proxy.Refuse(true)
	proxy.Drop()
	time.Sleep(25 * time.Second)
	proxy.Refuse(false)
	back := time.Now()
	waitFor(t, "the consumers to handle messages again after the broker came back", func() bool {
		now, _ := handledBy()
		return now > effects+50
	})
	t.Logf("the consumers handled messages again %s after the refusals ended", time.Since(back).Round(time.Second))

	proxy.Freeze(true)
	time.Sleep(25 * time.Second)
	proxy.Freeze(false)
	thawed := time.Now()
	<-sent
	deadline := thawed.Add(2 * time.Minute)
	for {
		effects, events := handledBy()
		if effects == messages && events == messages {
			break
		}
		require.True(t, time.Now().Before(deadline), "the backlog was not handled within two minutes of the end of the outage: %d/%d effects, %d/%d events",
			effects, messages, events, messages)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("every message handled and every event delivered %s after the broker answered again", time.Since(thawed).Round(time.Second))
	for _, c := range consumers {
		c.stop(t)
	}
	time.Sleep(time.Second) // room for a late duplicate downstream
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")
	doneRows, _, err := p.events(messages)
	require.NoError(t, err)
	require.EqualValues(t, messages, doneRows, "every event exactly once downstream")
	require.Zero(t, errorQueueLength(t, p.url, errorTopic), "no message reached the error topic")
	require.Zero(t, p.errorTopicLength(t, auditErrors), "no event reached the downstream's error topic")
}

#!/usr/bin/env bash
# The whole test suite: services, formatting, vet, lint, tests with -race,
# and the examples with their output checked.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"

# step names a step of the run, with the time since the start (the whole
# run is meant to stay under 15 minutes on CI's two cores).
SECONDS=0
step() { echo "test: [${SECONDS}s] $*"; }

# services.sh says which PostgreSQL the tests use; where it started a
# cluster of its own it hands on its DSN through this file.
services_env=$(mktemp)
POSTROOM_SERVICES_ENV=$services_env bash scripts/services.sh
. "$services_env"
rm -f "$services_env"
export POSTROOM_POSTGRES_DSN
echo "test: PostgreSQL for the tests: POSTROOM_POSTGRES_DSN=$(echo "$POSTROOM_POSTGRES_DSN" | sed -E 's#(://[^:/@]+):[^@/]*@#\1:xxxxx@#')"

# Tests delete the queues and exchanges they declare (internal/amqptest);
# runs before that left thousands, and on such a broker (each quorum queue a
# Raft group ticking) RabbitMQ alone takes most of two cores and the bus
# tests time out. With POSTROOM_TEST_RESET_BROKER=1 (.ci/run sets it) a
# local broker's default vhost is deleted and recreated first when it holds
# more than 1,000 queues; otherwise that is only reported.
if command -v rabbitmqctl >/dev/null 2>&1; then
  queues=$( (rabbitmqctl -q list_queues name 2>/dev/null || true) | wc -l)
  if [ "$queues" -gt 1000 ]; then
    if [ "${POSTROOM_TEST_RESET_BROKER:-}" = 1 ]; then
      echo "test: RabbitMQ's vhost / holds $queues queues left by earlier test runs: deleting and recreating it (POSTROOM_TEST_RESET_BROKER=1)"
      rabbitmqctl -q delete_vhost / && rabbitmqctl -q add_vhost / && rabbitmqctl -q set_permissions -p / guest '.*' '.*' '.*'
    else
      echo "test: warning: RabbitMQ's vhost / holds $queues queues; tests will be slow. POSTROOM_TEST_RESET_BROKER=1 make test deletes and recreates it"
    fi
  fi
fi

# broker_names lists the default vhost's queues and exchanges, one a line
# ("queue NAME", "exchange NAME"), sorted; nothing without rabbitmqctl.
broker_names() {
  command -v rabbitmqctl >/dev/null 2>&1 || return 0
  { (rabbitmqctl -q list_queues name --no-table-headers 2>/dev/null || true) | sed 's/^/queue /'
    (rabbitmqctl -q list_exchanges name --no-table-headers 2>/dev/null || true) | sed 's/^/exchange /'
  } | LC_ALL=C sort
}
broker_before=$(mktemp)
broker_after=$(mktemp)
trap 'rm -f "$broker_before" "$broker_after"' EXIT
broker_names >"$broker_before"

# broker_check compares the broker with before the tests: a name with a
# random part (12 hex digits: testenv.Name, UUIDs) or a command topic
# (".cmd.") that was not there belongs to a test that did not delete it
# (see internal/amqptest). The names tests share, event topics and the
# default error topic, may appear on a broker's first run, then stay.
broker_check() {
  command -v rabbitmqctl >/dev/null 2>&1 || return 0
  broker_names >"$broker_after"
  count() { grep -c "^$1 " "$2" || true; }
  echo "test: RabbitMQ's vhost / held $(count queue "$broker_before") queues and $(count exchange "$broker_before") exchanges before the tests, $(count queue "$broker_after") and $(count exchange "$broker_after") after"
  left=$(LC_ALL=C comm -13 "$broker_before" "$broker_after" | grep -E '[0-9a-fA-F]{12}|[.]cmd[.]' || true)
  if [ -n "$left" ]; then
    echo "test: warning: the tests left $(echo "$left" | grep -c '^queue ' || true) queues and $(echo "$left" | grep -c '^exchange ' || true) exchanges of their own on RabbitMQ (declared without internal/amqptest, or by a child process nobody cleaned up after; another run at the same time also shows here), e.g.:"
    echo "$left" | head -10 | sed 's/^/  /'
  fi
}

step "chromium for the browser tests (browsertest/)"
bash scripts/chromium.sh

# The foreign-producer example (docs/foreign-producers.md) runs a Node.js
# script with amqplib; its test fails in CI without them.
step "Node.js for examples/foreign-producer"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "test: node and npm are missing and there is no apt-get: install Node.js 18 or newer with npm, then run again"; exit 1
  fi
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "test: node or npm missing: installing Debian's nodejs and npm with apt-get"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
(cd examples/foreign-producer && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
echo "test: npm ci in examples/foreign-producer installed amqplib" \
  "$(node -p 'require("./examples/foreign-producer/node_modules/amqplib/package.json").version') (node $(node --version))"

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

step "go vet"
go vet ./...

STATICCHECK_VERSION=v0.8.2
step "staticcheck $STATICCHECK_VERSION"
go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...

step "the bench module (its own go.mod: ./... above does not reach it)"
make bench-check
(cd bench && go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...)

# The database fault tests start servers of their own (a PostgreSQL, a
# MariaDB) and spend most of their minutes waiting out the outages they
# cause, so they run beside the suite, from one test binary, one after the
# other. The broker outage test runs after the suite: its store is the
# tests' PostgreSQL, and beside the suite two tests of the SQL transport
# on that server timed out in a CI run (a transaction open anywhere on a
# PostgreSQL server holds back what the SQL transport may read there:
# docs/operations.md).
faults=$(mktemp -d)
step "the fault tests' binary (bus, -race), then the database fault tests in the background, logged to $faults"
go test -race -c -o "$faults/bus.test" ./bus/
fault() { # runs the bus fault tests named by the pattern $1 with the flag $2
  (cd bus && "$faults/bus.test" -test.count=1 -test.timeout 15m -test.run "$1" "$2")
}
(
  fault '^(TestDatabaseRestartedMidRun|TestDatabaseOutageOfAMinute)$' -fault.db >"$faults/postgres.log" 2>&1; echo $? >"$faults/postgres.status"
  fault '^TestMariaDBKilledThenStopped$' -fault.mariadb >"$faults/mariadb.log" 2>&1; echo $? >"$faults/mariadb.status"
) &
servers_pid=$!

step "go test -race (the fault tests run beside it)"
suite_status=0
go test -race -count=1 -timeout 20m ./... || suite_status=$?

step "the browser-test module (its own go.mod: ./... above does not reach it)"
browser_status=0
(cd browsertest && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./... && go test -race -count=1 -timeout 5m ./...) || browser_status=$?

step "three consumers cut off RabbitMQ for 50 s through a proxy of the test's own (the shared broker is not touched)"
outage_status=0
fault '^TestBrokerOutageOfAMinute$' -fault.outage >"$faults/outage.log" 2>&1 || outage_status=$?
echo "$outage_status" >"$faults/outage.status"

step "waiting for the database fault tests"
wait "$servers_pid" || true
fault_failed=0
for name in postgres mariadb outage; do
  status=$(cat "$faults/$name.status" 2>/dev/null || echo "not run")
  case $name in
    postgres) what="a PostgreSQL server of the tests' own restarted mid-run, then stopped for a minute (the shared PostgreSQL is not touched)" ;;
    mariadb) what="a MariaDB server of the test's own killed, then stopped, for 30 s each under load, with consumers on RabbitMQ, then on the SQL transport (the shared MariaDB is not touched)" ;;
    outage) what="three consumers cut off RabbitMQ for 50 s through a proxy of the test's own (the shared broker is not touched)" ;;
  esac
  if [ "$status" = 0 ]; then
    echo "test: fault test passed: $what ($(grep -cE '^--- PASS|^PASS' "$faults/$name.log" >/dev/null && tail -1 "$faults/$name.log"))"
  else
    echo "test: fault test FAILED (exit $status): $what; its output:"
    cat "$faults/$name.log"
    fault_failed=1
  fi
done
rm -rf "$faults"
if [ "$suite_status" -ne 0 ] || [ "$browser_status" -ne 0 ] || [ "$fault_failed" -ne 0 ]; then
  echo "test: failed (go test exit $suite_status, browser tests exit $browser_status, fault tests failed: $fault_failed)"; exit 1
fi

step "RabbitMQ's connections all closed mid-run (alone: it closes every test's connections)"
go test -race -count=1 -run '^TestBrokerConnectionsClosedMidRun$' ./bus/ -fault.broker

broker_check

step "a short fuzz run of every parser (seed corpus: the f.Add calls in the tests)"
# Counts, not durations: with a duration Go 1.26's fuzz coordinator can
# fail the run with "context deadline exceeded" at its end, no input at
# fault (golang/go#75804, fixed in Go 1.27; it failed a CI run here).
# About 10 s each on this machine.
go test -run '^$' -fuzz '^FuzzParseInterchange$' -fuzztime 150000x ./middleware/inbox/edi/
go test -run '^$' -fuzz '^FuzzMetadataVersion$' -fuzztime 100000x ./middleware/stale/

step "examples"
bash scripts/examples.sh
step "done"

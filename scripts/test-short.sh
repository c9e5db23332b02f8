#!/usr/bin/env bash
# The inner loop: gofmt, go vet and the tests that need no server (SQLite
# and the in-memory transport; -short skips every test of PostgreSQL,
# MariaDB and RabbitMQ), without the race detector. It starts nothing and
# installs nothing. `make test` is the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi
go vet ./...
go test -short -count=1 ./...
echo "test-short: passed in ${SECONDS}s (make test runs the whole suite against the servers)"

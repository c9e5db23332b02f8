#!/usr/bin/env bash
# The whole test suite: services, formatting, vet, lint, tests with -race,
# and the examples with their output checked.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"

bash scripts/services.sh

echo "test: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

echo "test: go vet"
go vet ./...

STATICCHECK_VERSION=v0.8.2
echo "test: staticcheck $STATICCHECK_VERSION"
go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...

echo "test: go test -race"
go test -race -count=1 -timeout 10m ./...

echo "test: PostgreSQL restarted mid-run (alone: it restarts the server every test shares)"
go test -race -count=1 -run '^TestDatabaseRestartedMidRun$' ./bus/ -fault.db

echo "test: a short fuzz run of every parser (seed corpus: the f.Add calls in the tests)"
go test -run '^$' -fuzz '^FuzzParseInterchange$' -fuzztime 10s ./middleware/inbox/
go test -run '^$' -fuzz '^FuzzMetadataVersion$' -fuzztime 10s ./middleware/stale/

echo "test: examples"
bash scripts/examples.sh

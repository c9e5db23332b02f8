#!/usr/bin/env bash
# Runs every example and checks its output.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(go run ./examples/quickstart)
echo "$out"
echo "$out" | grep -Eq '^summary: received=[0-9]+ handled=[0-9]+ duplicates=[1-9][0-9]* stale=[1-9][0-9]* errors=[1-9][0-9]*$' \
  || { echo "examples: quickstart did not print the expected summary line"; exit 1; }
echo "$out" | grep -Eq "^cleanup: inbox keys before=[1-9][0-9]* after=0$" \
  || { echo "examples: quickstart cleanup did not empty the inbox"; exit 1; }
echo "examples: quickstart ok"

out=$(go run ./examples/edi-invoicing)
echo "$out"
expected='invoices: 2 (X12 ZZ:ACMESUPPLY/000000905 received twice, created once; EDIFACT NORDICPARTS/INV00042 once)
accounting API: 3 calls, 2 entries (a call retried after a failure carried the same idempotency key)
summary: received=3 handled=2 duplicates=1 retried=1 errors=0'
[ "$out" = "$expected" ] || { echo "examples: edi-invoicing printed something else than its README says"; exit 1; }
echo "examples: edi-invoicing ok"

out=$(go run ./examples/rabbitmq-postgres)
echo "$out"
echo "$out" | grep -Eq '^workers: 3 processes, handled [0-9]+/[0-9]+/[0-9]+, duplicates skipped [0-9]+/[0-9]+/[0-9]+ \(scraped from their /metrics\)$' \
  && echo "$out" | grep -qx 'invoices: 300 for 300 orders (390 sends); events downstream: 300' \
  && echo "$out" | grep -qx 'duplicates skipped in all: 90' \
  && echo "$out" | grep -Eq '^cleanup: [1-9] runs in all on 3 workers' \
  && echo "$out" | grep -qx 'rabbitmq: deleted the 6 queues and 3 exchanges it declared for its endpoints' \
  || { echo "examples: rabbitmq-postgres printed something else than its README says"; exit 1; }
echo "examples: rabbitmq-postgres ok"

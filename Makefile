.PHONY: test test-short services quickstart bench bench-quick bench-sizing bench-charts bench-check

# The whole suite: brings up PostgreSQL, MariaDB and RabbitMQ if needed.
test:
	bash scripts/test.sh

# The inner loop: no server, no race detector (scripts/test-short.sh).
test-short:
	bash scripts/test-short.sh

services:
	bash scripts/services.sh

quickstart:
	go run ./examples/quickstart

# The benchmark is a module of its own (bench/), so the library's go.mod
# does not carry its chart code. docs/benchmarks.md explains the output.
bench:
	cd bench && go run ./cmd/postroom-bench

bench-quick:
	cd bench && go run ./cmd/postroom-bench -quick

# The sizing figures alone: CPU per inbox message, bytes per inbox row.
bench-sizing:
	cd bench && go run ./cmd/postroom-bench -sizing

# A full run that also redraws the charts of docs/benchmarks.md.
bench-charts:
	cd bench && go run ./cmd/postroom-bench -charts ../docs/img

# Builds and vets the bench module: `go build ./...` and `go vet ./...` in
# the root do not reach it.
bench-check:
	cd bench && test -z "$$(gofmt -l .)" && go build ./... && go vet ./...

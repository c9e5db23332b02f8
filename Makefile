.PHONY: test services quickstart

# The whole suite: brings up PostgreSQL, MariaDB and RabbitMQ if needed.
test:
	bash scripts/test.sh

services:
	bash scripts/services.sh

quickstart:
	go run ./examples/quickstart

// Package testenv gives tests real, isolated databases and a RabbitMQ URL:
// a fresh PostgreSQL schema, a fresh MariaDB/MySQL database or a SQLite
// file per test, dropped in t.Cleanup. A server that is not reachable fails
// the test with the command that starts it; only -short skips.
package testenv

// Package dialect holds the SQL that postroom's stores share, one statement
// per dialect: PostgreSQL, MySQL/MariaDB and SQLite. No other package builds
// SQL from table names; they all come through here, validated first.
package dialect

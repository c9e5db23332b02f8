// Package dialect defines Dialect, the interface a database implements
// with every SQL statement postroom runs on it, one package per database
// (internal/dialect/postgres, mysql, sqlite), and what those share: the
// statements alike everywhere, the builders, the tables' names. No other
// package builds SQL from table names; they all come through here,
// validated first.
package dialect

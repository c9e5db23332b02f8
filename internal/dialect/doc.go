// Package dialect defines Dialect, the interface each database package
// (internal/dialect/postgres, mysql, sqlite) implements with every SQL
// statement postroom runs on it, and what they share. No other package
// builds SQL from table names; they all come through here, validated.
package dialect

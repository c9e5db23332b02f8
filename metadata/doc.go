// Package metadata names the message metadata keys postroom reads and
// writes. The bus sets them on every message it sends; the middlewares read
// them by default. It imports nothing, so every package can share it.
package metadata

// Package idempotency computes the idempotency key of the inbox's
// external-effects mode, for the inbox, the postroom command and the
// console.
package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
)

// Key returns the idempotency key of a message for a consumer: 32 hex
// characters of SHA-256 over consumer, source and message ID. A handler
// reads it with inbox.IdempotencyKey.
func Key(consumer, source, messageID string) string {
	h := sha256.New()
	for _, part := range []string{consumer, source, messageID} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

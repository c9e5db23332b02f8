// Package idempotency computes the idempotency key of the inbox's
// external-effects mode, for the inbox, the postroom command and the
// console, and checks that keys are kept long enough.
package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
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

// ErrRetentionTooShort is the sentinel of CheckRetention's error.
var ErrRetentionTooShort = errors.New("inbox: retention is shorter than the redelivery horizon")

// CheckRetention refuses a retention shorter than horizon, the longest time
// after which a message may be delivered again (retries plus the broker's
// redelivery window): a key purged earlier lets a duplicate through.
func CheckRetention(retention, horizon time.Duration) error {
	if retention < horizon {
		return fmt.Errorf("%w: retention %s is shorter than the retry and redelivery horizon %s: raise the retention or lower the retries",
			ErrRetentionTooShort, retention, horizon)
	}
	return nil
}

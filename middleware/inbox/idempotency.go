package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

type idempotencyKey struct{}

// IdempotencyKey returns the idempotency key of the message handled in the
// External mode, or "" outside it: the same on every delivery and attempt
// of one message to one consumer. Pass it to the external system.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKey{}).(string)
	return k
}

// checksum is the message log's checksum of a payload: SHA-256, in hex.
func checksum(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

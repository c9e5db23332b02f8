package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

type idempotencyKey struct{}

// IdempotencyKey returns the idempotency key of the message being handled
// in the external-effects mode, or "" outside it. Pass it to the external
// system (an Idempotency-Key header, a request ID): it is the same on every
// delivery and every attempt of one message to one consumer.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKey{}).(string)
	return k
}

// checksum is the message log's checksum of a payload: SHA-256, in hex.
func checksum(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

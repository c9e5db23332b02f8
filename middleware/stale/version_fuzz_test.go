package stale_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/metadata"
	"github.com/postroom/postroom/middleware/stale"
)

// FuzzMetadataVersion: any metadata gives a version or a VersionError,
// never a panic, and a parsed version round-trips through its text.
func FuzzMetadataVersion(f *testing.F) {
	for _, seed := range []string{"2026-01-01T12:00:00Z", "2026-01-01T12:00:00.123456789+02:00", "", "yesterday", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"} {
		f.Add("entity-1", seed)
	}
	f.Fuzz(func(t *testing.T, entity, version string) {
		msg := message.NewMessage("m", nil)
		msg.Metadata.Set(metadata.EntityID, entity)
		msg.Metadata.Set(metadata.Version, version)
		v, err := stale.MetadataVersion(msg)
		if err != nil {
			if !errors.Is(err, stale.ErrBadVersion) {
				t.Fatalf("error %v is not a VersionError", err)
			}
			return
		}
		if version != "" && !v.At.Equal(mustParse(t, v.At.Format(time.RFC3339Nano))) {
			t.Fatalf("version %q does not round-trip", version)
		}
	})
}

func mustParse(t *testing.T, s string) time.Time {
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("re-parse %q: %v", s, err)
	}
	return at
}

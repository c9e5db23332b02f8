package dialect

import (
	"fmt"
	"time"
)

// TimeText is the fixed-width layout times are stored in as text (SQLite),
// so that comparing the text compares the instants.
const TimeText = "2006-01-02 15:04:05.000000"

// Micro is t in UTC with microsecond precision, as every store keeps it.
func Micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func (Shared) ParseTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return v.UTC(), nil
	case string:
		return parseTimeText(v)
	case []byte:
		return parseTimeText(string(v))
	default:
		return time.Time{}, fmt.Errorf("dialect: cannot read %T as a time", v)
	}
}

func parseTimeText(s string) (time.Time, error) {
	for _, layout := range []string{TimeText, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("dialect: cannot parse time %q", s)
}

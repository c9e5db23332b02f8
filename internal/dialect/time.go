package dialect

import (
	"fmt"
	"time"
)

// sqliteTime is the fixed-width layout times are stored in on SQLite, so that
// comparing the text compares the instants.
const sqliteTime = "2006-01-02 15:04:05.000000"

// Time returns t as the argument to bind for a timestamp column: UTC with
// microsecond precision on every dialect, fixed-width text on SQLite.
func (d Dialect) Time(t time.Time) any {
	t = t.UTC().Truncate(time.Microsecond)
	if d == SQLite {
		return t.Format(sqliteTime)
	}
	return t
}

// ParseTime turns a scanned timestamp column back into a time.Time.
func (d Dialect) ParseTime(v any) (time.Time, error) {
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
	for _, layout := range []string{sqliteTime, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("dialect: cannot parse time %q", s)
}

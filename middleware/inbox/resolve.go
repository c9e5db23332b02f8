package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
)

// Unresolved is a claim of the External mode whose outcome is unknown:
// parked, or processing with a lease that ran out (its process stopped and
// the message has not come back yet).
type Unresolved struct {
	Consumer    string    `json:"consumer"`
	Source      string    `json:"source"`
	MessageID   string    `json:"message_id"`
	MessageType string    `json:"message_type"`
	ReceivedAt  time.Time `json:"received_at"`
	Status      string    `json:"status"`
	LeaseUntil  time.Time `json:"lease_until,omitzero"`
	Attempts    int       `json:"attempts"`
}

// ListUnresolved returns up to limit unresolved claims of table (empty for
// TableDefault), oldest first, as of now.
func ListUnresolved(ctx context.Context, db *gorm.DB, table string, now time.Time, limit int) ([]Unresolved, error) {
	d, table, err := storeOf(db, table)
	if err != nil {
		return nil, err
	}
	rows, err := db.WithContext(ctx).Raw(d.ClaimsUnresolved(table), d.Time(now), limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("inbox: list unresolved: %w", err)
	}
	defer rows.Close()
	var out []Unresolved
	for rows.Next() {
		var u Unresolved
		var received, lease any
		if err := rows.Scan(&u.Consumer, &u.Source, &u.MessageID, &u.MessageType, &received, &u.Status, &lease, &u.Attempts); err != nil {
			return nil, fmt.Errorf("inbox: list unresolved: %w", err)
		}
		if u.ReceivedAt, err = d.ParseTime(received); err != nil {
			return nil, err
		}
		if u.LeaseUntil, err = d.ParseTime(lease); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// Resolution is what an operator found out about an unresolved claim.
type Resolution int

const (
	// Happened: the effect did happen. The key is marked done; a later
	// copy of the message (a replay from the error topic) is a duplicate.
	Happened Resolution = iota + 1
	// DidNotHappen: the effect did not happen. The claim is released; the
	// next copy of the message (replay it from the error topic) runs the
	// handler again.
	DidNotHappen
)

// ErrNotUnresolved is returned by Resolve for a key that has no unresolved
// claim (unknown, done, released, or processing under a live lease).
var ErrNotUnresolved = errors.New("inbox: no unresolved claim with this key: list them with `postroom inbox unresolved`")

// Resolve records what happened to the unresolved claim of key for
// consumer, as of now.
func Resolve(ctx context.Context, db *gorm.DB, table, consumer string, key Key, r Resolution, now time.Time) error {
	d, table, err := storeOf(db, table)
	if err != nil {
		return err
	}
	status := dialect.StatusDone
	switch r {
	case Happened:
	case DidNotHappen:
		status = dialect.StatusReleased
	default:
		return fmt.Errorf("inbox: resolution %d is neither Happened nor DidNotHappen", r)
	}
	res := db.WithContext(ctx).Exec(d.ClaimResolve(table), status, d.Time(now), consumer, key.Source, key.MessageID, d.Time(now))
	if res.Error != nil {
		return fmt.Errorf("inbox: resolve: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("%w (consumer %s, source %q, message %s)", ErrNotUnresolved, consumer, key.Source, key.MessageID)
	}
	return nil
}

func storeOf(db *gorm.DB, table string) (dialect.Dialect, string, error) {
	table = cmp.Or(table, TableDefault)
	if err := dialect.ValidateIdentifier(table); err != nil {
		return "", "", fmt.Errorf("inbox: %w", err)
	}
	d, err := dialect.Of(db)
	if err != nil {
		return "", "", fmt.Errorf("inbox: %w", err)
	}
	return d, table, nil
}

package claims

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/dialects"
	"github.com/postroom/postroom/middleware/inbox"
)

// Unresolved is an External claim whose outcome is unknown: parked, or
// processing with a lease that ran out.
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
// inbox.TableDefault), oldest first, as of now.
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
	// Happened: the key is marked done; a later copy is a duplicate.
	Happened Resolution = iota + 1
	// DidNotHappen: the claim is released; the next copy runs the handler.
	DidNotHappen
)

// ErrNotUnresolved is returned by Resolve for a key that has no unresolved
// claim (unknown, done, released, or processing under a live lease).
var ErrNotUnresolved = errors.New("inbox: no unresolved claim with this key: list them with `postroom inbox unresolved`")

// ErrClaimChanged is returned by ResolveAttempt when the claim moved past
// the attempt the operator saw.
var ErrClaimChanged = errors.New("inbox: the claim changed since it was shown: " +
	"a later copy of the message ran the handler again; nothing was resolved, look at it again")

// ErrAttemptNotReached is returned by ResolveAttempt for an attempt the
// claim never reached; nothing is resolved.
var ErrAttemptNotReached = errors.New("inbox: the claim has not reached this attempt")

// Resolve records what happened to the unresolved claim of key for
// consumer, as of now, whatever its attempt. An operator who looked at
// one attempt (a list, a confirmation page) uses ResolveAttempt.
func Resolve(ctx context.Context, db *gorm.DB, table, consumer string, key inbox.Key, r Resolution, now time.Time) error {
	return resolve(ctx, db, table, consumer, key, 0, r, now)
}

// ResolveAttempt is Resolve for the attempt the operator looked at
// (ListUnresolved's Attempts); at another attempt it changes nothing and
// fails with [ErrClaimChanged] or [ErrAttemptNotReached].
func ResolveAttempt(ctx context.Context, db *gorm.DB, table, consumer string, key inbox.Key, attempts int, r Resolution, now time.Time) error {
	if attempts < 1 {
		return fmt.Errorf("inbox: attempt %d: a claim's attempts start at 1 (the ATTEMPTS column of `postroom inbox unresolved`)", attempts)
	}
	return resolve(ctx, db, table, consumer, key, attempts, r, now)
}

// resolve resolves the claim of key at attempts, or at any attempt (0).
func resolve(ctx context.Context, db *gorm.DB, table, consumer string, key inbox.Key, attempts int, r Resolution, now time.Time) error {
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
	args := []any{status, d.Time(now), consumer, key.Source, key.MessageID, d.Time(now)}
	query := d.ClaimResolve(table)
	if attempts > 0 {
		query, args = d.ClaimResolveAttempt(table), append(args, attempts)
	}
	res := db.WithContext(ctx).Exec(query, args...)
	if res.Error != nil {
		return fmt.Errorf("inbox: resolve: %w", res.Error)
	}
	if res.RowsAffected > 0 {
		return nil
	}
	// Say what the claim is (a second --done or a mistyped key?).
	var cur struct {
		Status   string
		Attempts int
	}
	var lease, checksum any
	row := db.WithContext(ctx).Raw(d.ClaimRead(table), consumer, key.Source, key.MessageID).Row()
	if err := row.Scan(&cur.Status, &lease, &cur.Attempts, &checksum); errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w (consumer %s, source %q, message %s: no claim with this key)", ErrNotUnresolved, consumer, key.Source, key.MessageID)
	} else if err != nil {
		return fmt.Errorf("inbox: resolve: read the claim: %w", err)
	}
	switch {
	case attempts > 0 && cur.Attempts > attempts:
		return fmt.Errorf("%w (consumer %s, source %q, message %s: attempt %d was shown, the claim is at attempt %d, %s)",
			ErrClaimChanged, consumer, key.Source, key.MessageID, attempts, cur.Attempts, cur.Status)
	case attempts > 0 && cur.Attempts < attempts:
		return fmt.Errorf("%w (consumer %s, source %q, message %s: the claim is at attempt %d, %s; attempt %d is not it): nothing was resolved; give the ATTEMPTS column of `postroom inbox unresolved`",
			ErrAttemptNotReached, consumer, key.Source, key.MessageID, cur.Attempts, cur.Status, attempts)
	}
	what := map[string]string{
		dialect.StatusDone:       "done already: handled, or resolved as done",
		dialect.StatusReleased:   "released already: the next copy of the message runs the handler again",
		dialect.StatusProcessing: "processing under a live lease: an attempt may still be running; it is unresolved once its lease runs out",
	}[cur.Status]
	if what == "" {
		what = cur.Status
	}
	return fmt.Errorf("%w (consumer %s, source %q, message %s: the claim is %s, attempt %d)", ErrNotUnresolved, consumer, key.Source, key.MessageID, what, cur.Attempts)
}

func storeOf(db *gorm.DB, table string) (dialect.Dialect, string, error) {
	table = cmp.Or(table, inbox.TableDefault)
	if err := dialect.ValidateIdentifier(table); err != nil {
		return nil, "", fmt.Errorf("inbox: %w", err)
	}
	d, err := dialects.Of(db)
	if err != nil {
		return nil, "", fmt.Errorf("inbox: %w", err)
	}
	return d, table, nil
}

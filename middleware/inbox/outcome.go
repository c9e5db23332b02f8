package inbox

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotDone is the sentinel of the errors [NotDone] returns.
var ErrNotDone = errors.New("inbox: the external effect did not happen")

// NotDone wraps a handler's error to say that its external effect certainly
// did not happen: in the External mode the claim is released and the
// redelivery runs the handler again; any other error leaves the outcome
// unknown.
func NotDone(err error) error { return &notDoneError{err} }

type notDoneError struct{ err error }

func (e *notDoneError) Error() string {
	if e.err == nil {
		return ErrNotDone.Error()
	}
	return ErrNotDone.Error() + ": " + e.err.Error()
}
func (e *notDoneError) Unwrap() error        { return e.err }
func (e *notDoneError) Is(target error) bool { return target == ErrNotDone }

// ErrOutcomeUnknown is the sentinel every [*OutcomeUnknownError] matches.
var ErrOutcomeUnknown = errors.New("inbox: outcome unknown")

// OutcomeUnknownError says that an External attempt ended without a known
// outcome under [Park]: the message goes to the error topic and is not run
// again until an operator resolves it. It is unrecoverable.
type OutcomeUnknownError struct {
	Consumer string
	Key      Key
	Attempts int
	Err      error // the attempt's error; nil when an earlier attempt left the key so
}

// Error names the message and says what the operator does next.
func (e *OutcomeUnknownError) Error() string {
	cause := "an earlier attempt left the key parked or its lease ran out (its call failed with an unknown outcome, or its process stopped mid-call)"
	if e.Err != nil {
		cause = "the handler failed: " + e.Err.Error()
	}
	return fmt.Sprintf("inbox: outcome unknown: consumer %s, source %q, message %s, attempt %d: %s; parked: find out whether the effect happened, then run `%s` if it did, or the same with --release instead of --done if it did not",
		e.Consumer, e.Key.Source, e.Key.MessageID, e.Attempts, cause, e.resolveCommand())
}

// resolveCommand is the shell-ready `postroom inbox resolve … --done` for
// this attempt (an ID beginning with '-' follows "--").
func (e *OutcomeUnknownError) resolveCommand() string {
	cmd := "postroom inbox resolve " + shellWord(e.Consumer)
	id := shellWord(e.Key.MessageID)
	flagLike := strings.HasPrefix(e.Key.MessageID, "-")
	if !flagLike {
		cmd += " " + id
	}
	if e.Key.Source != "" {
		cmd += " --source " + shellWord(e.Key.Source)
	}
	if e.Attempts > 0 {
		cmd += fmt.Sprintf(" --attempts %d", e.Attempts)
	}
	cmd += " --done"
	if flagLike {
		cmd += " -- " + id
	}
	return cmd
}

// shellWord is s as one POSIX shell word, single-quoted when needed.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@+,%=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the attempt's error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Unrecoverable tells the bus not to retry.
func (e *OutcomeUnknownError) Unrecoverable() bool { return true }

// ErrIDReused is matched by the error of a message that reused a
// recorded key with another payload checksum.
var ErrIDReused = errors.New("inbox: message ID reused with different content")

// reusedIDError says that a message reused a recorded key with another
// payload checksum: a producer bug, not a duplicate. It is unrecoverable.
type reusedIDError struct {
	Consumer string
	Key      Key
	// Stored is the checksum recorded with the key; Got the message's.
	Stored, Got string
}

// Error names the message and both checksums.
func (e *reusedIDError) Error() string {
	return fmt.Sprintf("inbox: message ID reused with different content: consumer %s, source %q, message %s: stored checksum %s, this message %s: the producer reuses IDs; give each message its own",
		e.Consumer, e.Key.Source, e.Key.MessageID, e.Stored, e.Got)
}

// Is makes errors.Is(err, ErrIDReused) true.
func (e *reusedIDError) Is(target error) bool { return target == ErrIDReused }

// Unrecoverable tells the bus not to retry.
func (e *reusedIDError) Unrecoverable() bool { return true }

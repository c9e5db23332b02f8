package testenv

import (
	"bytes"
	"log/slog"
	"sync"
)

// Logs is a log's text, written by a logger and read by a test at once.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// CapturedLogger returns a text logger from level up and the Logs it
// writes to, for a test that checks what is said.
func CapturedLogger(level slog.Level) (*slog.Logger, *Logs) {
	l := &Logs{}
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: level})), l
}

// Write appends p.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns what was written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

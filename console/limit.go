package console

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
)

// LoginFailuresDefault is how many wrong tokens one remote address may send
// a minute; further attempts get 429 until the oldest is a minute old.
const LoginFailuresDefault = 5

// loginWindow is the window LoginFailuresDefault counts in.
const loginWindow = time.Minute

// loginLimiter counts the wrong tokens of each remote address over the
// last minute. The zero value is ready to use.
type loginLimiter struct {
	mu       sync.Mutex
	failures map[string][]time.Time // by address, oldest first, within loginWindow
}

// blocked returns how long addr must wait before its next attempt, or 0.
func (l *loginLimiter) blocked(addr string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	recent := l.recent(addr, now)
	if len(recent) < LoginFailuresDefault {
		return 0
	}
	return recent[len(recent)-LoginFailuresDefault].Add(loginWindow).Sub(now)
}

// failed records a wrong token from addr and forgets addresses whose
// failures all left the window.
func (l *loginLimiter) failed(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures == nil {
		l.failures = map[string][]time.Time{}
	}
	for a := range l.failures {
		l.recent(a, now)
	}
	l.failures[addr] = append(l.failures[addr], now)
}

// succeeded forgets addr's failures.
func (l *loginLimiter) succeeded(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, addr)
}

// recent drops addr's failures older than the window and returns the rest.
// Callers hold l.mu.
func (l *loginLimiter) recent(addr string, now time.Time) []time.Time {
	list := l.failures[addr]
	i := 0
	for i < len(list) && now.Sub(list[i]) >= loginWindow {
		i++
	}
	list = list[i:]
	if len(list) == 0 {
		delete(l.failures, addr)
	} else {
		l.failures[addr] = list
	}
	return list
}

// tooMany answers 429 with the seconds to wait in Retry-After.
func (c *Console) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	seconds := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", fmt.Sprint(seconds))
	c.refuse(w, r, http.StatusTooManyRequests, fmt.Sprintf("%d wrong access tokens from this address within a minute: try again in %d s", LoginFailuresDefault, seconds))
}

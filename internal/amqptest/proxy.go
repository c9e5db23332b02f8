package amqptest

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

// Proxy forwards TCP connections to the test broker, so a test can fail a
// client's connection without touching the broker (see Drop, Refuse,
// Blackhole and Freeze).
type Proxy struct {
	ln        net.Listener
	target    string
	refuse    atomic.Bool
	blackhole atomic.Bool
	frozen    atomic.Bool
	stopped   atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the test broker and returns it with the AMQP
// URL that goes through it; it stops when the test ends.
func NewProxy(t testing.TB) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(testenv.RequireAMQP(t))
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5672")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		p.stopped.Store(true)
		_ = ln.Close()
		p.Drop()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Drop closes every connection the proxy holds; new ones are forwarded
// (unless Blackhole).
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Refuse closes new connections as soon as they are taken while on.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Blackhole makes new connections hang (taken, never answered) while on.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Freeze holds every byte the proxy reads while on, closing nothing.
func (p *Proxy) Freeze(on bool) { p.frozen.Store(on) }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		p.keep(c)
		if p.blackhole.Load() {
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.keep(b)
		p.wg.Add(2)
		go p.pipe(b, c)
		go p.pipe(c, b)
	}
}

// pipe copies src to dst, holding what it read while frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.frozen.Load() && !p.stopped.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) keep(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

package amqptest

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

// Proxy forwards TCP connections to the test broker, so that a test can
// drop a client's connection at a chosen moment (an operator command cut
// off mid-way) without touching the broker. (transport/amqp's reconnect
// tests have their own, with more ways to fail.)
type Proxy struct {
	ln     net.Listener
	target string

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
		_ = ln.Close()
		p.Drop()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Drop closes every connection the proxy holds; new ones are forwarded.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(b, c)
		go p.pipe(c, b)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
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

package faultproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCP is a TCP proxy on loopback in front of a server that speaks its own
// protocol (PostgreSQL, Redis), which cuts connections on demand: the
// fault a network or a failing server gives, which an emulator never
// does. Close it with the test (New registers it).
type TCP struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   int // client writes still to cut
	cuts  int // connections cut so far
	wg    sync.WaitGroup
}

// NewTCP listens on loopback and forwards every connection to target
// (host:port); it is closed, with its connections, when t ends.
func NewTCP(t testing.TB, target string) *TCP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &TCP{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port, for the client in place of the server's.
func (p *TCP) Addr() string { return p.ln.Addr().String() }

// CutNext makes the next n writes of any client (a request, or a
// connection's opening) end their connection instead of reaching the
// server: the client sees its connection closed, not knowing whether its
// request was carried out.
func (p *TCP) CutNext(n int) {
	p.mu.Lock()
	p.cut = n
	p.mu.Unlock()
}

// Cuts is how many connections the proxy has cut.
func (p *TCP) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *TCP) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Go(func() {
			_, _ = io.Copy(c, s)
			p.drop(c, s)
		})
		p.wg.Go(func() { p.forward(c, s) })
	}
}

// forward copies the client's writes to the server, unless one is to be
// cut.
func (p *TCP) forward(c, s net.Conn) {
	defer p.drop(c, s)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.cutting() {
				return
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *TCP) cutting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut <= 0 {
		return false
	}
	p.cut--
	p.cuts++
	return true
}

// track records a connection pair; false once the proxy is closed.
func (p *TCP) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_, _ = c.Close(), s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

func (p *TCP) drop(c, s net.Conn) {
	_, _ = c.Close(), s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

func (p *TCP) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for x := range p.conns {
		_ = x.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
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
	lose  int // client writes still to forward with their answer lost
	cuts  int // connections cut so far
	// held, while paused, is closed by Resume: the client writes wait
	// for it.
	held chan struct{}
	wg   sync.WaitGroup
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

// LoseReplyNext makes the next n writes of any client reach the server,
// and the server's answer to each end its connection instead of reaching
// the client: the request was carried out, and the client cannot know it.
func (p *TCP) LoseReplyNext(n int) {
	p.mu.Lock()
	p.lose = n
	p.mu.Unlock()
}

// Pause holds every client write from now until Resume, on the
// connections open and on those made meanwhile (still accepted): the
// server gets nothing and the client waits for answers that do not come,
// as with a server that hangs or a network that drops its packets.
func (p *TCP) Pause() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume forwards what Pause held, and what follows.
func (p *TCP) Resume() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
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
		var mute atomic.Bool
		p.wg.Go(func() { p.answer(c, s, &mute) })
		p.wg.Go(func() { p.forward(c, s, &mute) })
	}
}

// forward copies the client's writes to the server, unless one is to be
// cut; one whose answer is to be lost mutes the answers.
func (p *TCP) forward(c, s net.Conn, mute *atomic.Bool) {
	defer p.drop(c, s)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held // Resume, or the proxy's close
			}
			cut, lose := p.next()
			if cut {
				return
			}
			if lose {
				mute.Store(true)
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

// answer copies the server's answers to the client until one comes muted:
// that one ends the connection.
func (p *TCP) answer(c, s net.Conn, mute *atomic.Bool) {
	defer p.drop(c, s)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if mute.Load() {
				p.mu.Lock()
				p.cuts++
				p.mu.Unlock()
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// next says what to do with a client's write: cut it, or forward it and
// lose its answer.
func (p *TCP) next() (cut, lose bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cut > 0:
		p.cut--
		p.cuts++
		return true, false
	case p.lose > 0:
		p.lose--
		return false, true
	}
	return false, false
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
	p.Resume()
	_ = p.ln.Close()
	p.mu.Lock()
	for x := range p.conns {
		_ = x.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

package bridgetest

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Proxy is a TCP proxy on a loopback port in front of a real server. Freeze
// stops forwarding bytes in both directions while every connection stays
// open, as a hung server or a black-holed network does: the client sees no
// disconnect, its requests simply get no answer. Thaw resumes.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  map[net.Conn]struct{}
	// held are the connections FreezeOpen froze.
	held map[net.Conn]bool
	wg   sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards every connection
// to target (host:port). It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1:0", target)
}

// StartProxyOn is StartProxy listening on addr: a server that appears at
// an address a client was already given.
func StartProxyOn(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, held: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding; connections stay open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// FreezeOpen stops forwarding on the connections open now, which stay
// open, while new connections are forwarded: a server that stopped
// answering its sessions while a new address (a DNS name flipped, a
// failover behind a proxy) reaches another.
func (p *Proxy) FreezeOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.held[c] = true
	}
}

// Thaw resumes forwarding, including the bytes held while frozen.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	clear(p.held)
	p.cond.Broadcast()
}

// Close stops listening and closes every connection. Idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.cond.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

// track records the pair of connections; false when the proxy is closed.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// untrack closes the connections and forgets them.
func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
		delete(p.held, c)
	}
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
// When either side fails both are closed.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer p.untrack(src, dst)
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitThawed(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitThawed blocks while src is frozen; false when the proxy was closed.
func (p *Proxy) waitThawed(src net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for (p.frozen || p.held[src]) && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

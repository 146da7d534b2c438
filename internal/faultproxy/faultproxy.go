// Package faultproxy is a TCP proxy for tests that puts faults between a
// client and a real server: it passes traffic, black-holes it (connections
// stay open and silent, as behind a dead link), or resets every connection.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards bytes both ways.
	Pass Mode = iota
	// Blackhole accepts connections and reads what clients send, but
	// forwards nothing either way.
	Blackhole
	// Reset closes every connection with a TCP reset and resets new ones
	// as soon as they are accepted.
	Reset
)

// Proxy forwards one listening address to a target. It is safe for
// concurrent use. Build it with New; Close it when done.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   Mode
	change chan struct{} // closed and replaced when mode changes
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New listens on 127.0.0.1 and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, change: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the mode. Reset drops every open connection at once.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	close(p.change)
	p.change = make(chan struct{})
	if m == Reset {
		for c := range p.conns {
			reset(c)
		}
	}
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	close(p.change) // wake everything waiting for a mode change
	p.change = make(chan struct{})
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) state() (Mode, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.change
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if m, _ := p.state(); m == Reset {
			reset(client)
			continue
		}
		if !p.track(client) {
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve connects client to the target (once the mode lets it) and pumps
// bytes both ways, holding them back while black-holed.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if m, changed := p.state(); m != Pass {
		// Black-holed before the server was even reached: swallow what
		// the client sends until the fault ends, then drop the connection
		// (its bytes are gone; the client will reconnect).
		go func() { _, _ = io.Copy(io.Discard, client) }()
		if m == Blackhole {
			<-changed
		}
		reset(client)
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client); done <- struct{}{} }()
	go func() { p.pump(client, server); done <- struct{}{} }()
	<-done
}

// pump copies src to dst, holding each chunk while the proxy is black-holed
// and stopping when it resets.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				m, changed := p.state()
				if m == Pass {
					break
				}
				if p.isClosed() {
					return
				}
				if m == Reset {
					reset(dst)
					reset(src)
					return
				}
				<-changed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				_ = dst.Close()
			}
			return
		}
	}
}

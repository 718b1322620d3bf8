package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Timing of a Pinger.
const (
	// PingEvery is how often a running Pinger asks the server for a PONG.
	PingEvery = time.Second
	// PingTimeout is how long one PING waits for its PONG.
	PingTimeout = time.Second
	// unresponsiveAfter: a server that answered no PING sent within this
	// long is unresponsive.
	unresponsiveAfter = 3 * time.Second
)

// ErrServerUnresponsive is wrapped by AnsweredSince's callers' errors: the
// NATS server answered no PING sent after a publish (frozen, overloaded
// beyond reason, or cut off by a network that keeps the TCP connection
// open), so the publish's lost PubAck says nothing about the message.
var ErrServerUnresponsive = errors.New("the NATS server does not answer (no PONG to a PING sent after the publish)")

// Pinger tells whether the NATS server answers on a connection. A server
// frozen (SIGSTOP, a stuck VM, a network partition that does not reset the
// connection) leaves the TCP connection open: the client stays CONNECTED,
// and nats.go notices only after its own pings go unanswered
// (nats.PingInterval × MaxPingsOut), minutes by default. Meanwhile every
// publish waits out relay.publish_timeout. The Pinger flushes the
// connection — a PING the server answers with a PONG after everything sent
// before it — every PingEvery while it runs, and on demand. Safe for
// concurrent use.
type Pinger struct {
	nc     *nats.Conn
	logger *slog.Logger

	// answered is when the last PING that got its PONG was sent (unix
	// nanoseconds); it starts at the creation of the Pinger.
	answered atomic.Int64
	quiet    atomic.Bool // the server is unresponsive and it was logged

	mu       sync.Mutex
	inflight *pingCall // the PING in flight, shared by its callers
}

type pingCall struct {
	done chan struct{} // closed when the PING is answered or given up
	err  error
}

// NewPinger watches nc, which was just connected.
func NewPinger(nc *nats.Conn, logger *slog.Logger) *Pinger {
	p := &Pinger{nc: nc, logger: logger}
	p.answered.Store(time.Now().UnixNano())
	return p
}

// Run pings every PingEvery until ctx ends, and logs when the server stops
// answering and when it answers again.
func (p *Pinger) Run(ctx context.Context) {
	t := time.NewTicker(PingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := p.Ping(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !p.Responsive() && p.quiet.CompareAndSwap(false, true):
			p.logger.Warn("NATS server does not answer; claiming nothing until it does", slog.Any("error", err))
		case err == nil && p.quiet.CompareAndSwap(true, false):
			p.logger.Info("NATS server answers again")
		}
	}
}

// Ping sends a PING and waits up to PingTimeout (or until ctx ends) for its
// PONG. Concurrent callers share one PING.
func (p *Pinger) Ping(ctx context.Context) error {
	p.mu.Lock()
	call := p.inflight
	if call == nil {
		call = &pingCall{done: make(chan struct{})}
		p.inflight = call
		go p.ping(call)
	}
	p.mu.Unlock()
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pinger) ping(call *pingCall) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), PingTimeout)
	err := p.nc.FlushWithContext(ctx)
	cancel()
	if err == nil {
		for {
			old := p.answered.Load()
			if old >= sent.UnixNano() || p.answered.CompareAndSwap(old, sent.UnixNano()) {
				break
			}
		}
	} else if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no PONG within %s", PingTimeout)
	}
	call.err = err
	p.mu.Lock()
	p.inflight = nil
	p.mu.Unlock()
	close(call.done)
}

// Responsive reports whether the connection is connected and the server
// answered a PING sent within the last three seconds (the running Pinger
// sends one every second).
func (p *Pinger) Responsive() bool {
	return p.nc.IsConnected() && time.Since(time.Unix(0, p.answered.Load())) < unresponsiveAfter
}

// AnsweredSince reports whether the server answered a PING sent at or
// after t: then it read everything sent before that PING, a publish begun
// before t among it. When no such PING was answered yet, it sends one and
// waits for its PONG until ctx ends (at most PingTimeout).
func (p *Pinger) AnsweredSince(ctx context.Context, t time.Time) bool {
	if p.answered.Load() >= t.UnixNano() {
		return true
	}
	_ = p.Ping(ctx)
	return p.answered.Load() >= t.UnixNano()
}

// Check is the readiness check of the connection: connected, and the
// server answers a PING now.
func (p *Pinger) Check(ctx context.Context) error {
	if !p.nc.IsConnected() {
		return errors.New("not connected: " + p.nc.Status().String())
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("connected, but the server does not answer: %w", err)
	}
	return nil
}

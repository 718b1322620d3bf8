package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/config"
)

// PublishTimeoutDefault is the wait for one PubAck when the caller's
// context has no deadline: relay.publish_timeout's default.
const PublishTimeoutDefault = config.PublishTimeoutDefault

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("jetstream publisher closed")

// ErrNotSent is wrapped by the error of a publish that never reached the
// connection: it was closed (for good) before the message was handed to
// it. The message was not sent, so nothing of it can be stored.
var ErrNotSent = errors.New("not sent: the NATS connection is closed")

// ErrClosedByAnother is wrapped by the error of a publish waiting for its
// PubAck when the server closed the connection because a protocol line was
// longer than its max_control_line, and this message's subject is shorter
// than the longest sent on the connection: another message's line closed
// it, not this one's. The outcome of this message is unknown (it may be
// stored); it is not its fault.
var ErrClosedByAnother = errors.New("the NATS connection was closed for good by a longer publish line than this message's (max_control_line)")

// ErrLineTooLong is wrapped by the error of a publish waiting for its
// PubAck when the server closed the connection because a protocol line was
// longer than its max_control_line, and this message's subject is the
// longest sent on the connection: its own line was (at least as) long as
// the one that closed it. The same line would close every connection.
var ErrLineTooLong = errors.New("the NATS server closed the connection: this message's publish line is longer than the server's max_control_line")

// ErrAckDeadline is wrapped by the error of a message whose wait for its
// PubAck its ack deadline ended short of PublishTimeout (Batch.Send's by):
// it was handed over late, behind a long batch or its turn, and its
// outcome must reach its source before the source stops waiting. Its
// outcome is unknown; it says nothing about the message, nor about the
// stream (which had less than its publish timeout to answer).
var ErrAckDeadline = errors.New("no PubAck before the ack deadline ended the wait, short of the publish timeout: handed over late")

// ErrUnresponsive is wrapped by the error of a publish that got no PubAck
// in time while the server answered no PING sent after it (see
// Config.Answered): the server (or the way to it) is frozen, which says
// nothing about the message.
var ErrUnresponsive = errors.New("the NATS server does not answer: no PONG to a PING sent after the publish")

// Marshaler turns a Watermill message into the NATS message to publish on
// subject.
type Marshaler interface {
	Marshal(subject string, msg *message.Message) (*nats.Msg, error)
}

// MetadataMarshaler copies every metadata entry into a header of the same
// name and the payload into the data. The message UUID becomes
// Nats-Msg-Id unless the metadata sets one.
type MetadataMarshaler struct{}

// Marshal implements Marshaler.
func (MetadataMarshaler) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	m.Data = msg.Payload
	for k, v := range msg.Metadata {
		m.Header.Set(k, v)
	}
	if m.Header.Get(jetstream.MsgIDHeader) == "" {
		m.Header.Set(jetstream.MsgIDHeader, msg.UUID)
	}
	return m, nil
}

// Config configures a Publisher.
type Config struct {
	// PublishTimeout is the wait for one PubAck when the context of the
	// message has no earlier deadline. Defaults to 5s.
	PublishTimeout time.Duration
	// Marshaler builds the NATS message. Defaults to MetadataMarshaler.
	Marshaler Marshaler
	// Denied, when set, is asked about a publish that got no PubAck in
	// time: a non-nil error (the server's permission violation for subject
	// since the publish began) becomes the publish's error instead of the
	// timeout. A server that refuses a publish for want of permission tells
	// only the connection's asynchronous error handler, and the publish
	// times out. Defaults to nil.
	Denied func(subject string, since time.Time) error
	// Conn, when set, is the connection js publishes on: when it is closed
	// for good, the publishes waiting for a PubAck fail at once (the client
	// fails them only on a disconnect, and a closed connection never
	// delivers their PubAcks). When the server closed it for a protocol
	// line over its max_control_line, a message whose subject is shorter
	// than the longest sent on the connection fails with
	// ErrClosedByAnother (another line closed it), the others with
	// ErrLineTooLong; otherwise with nats.ErrConnectionClosed.
	// Defaults to nil.
	Conn *nats.Conn
	// Answered, when set, is asked about a publish that got no PubAck in
	// time: whether the server answered a PING sent after the publish began
	// (broker.Pinger.AnsweredSince), waiting at most answeredWait for a
	// PONG. When it did not, the publish fails with ErrUnresponsive instead
	// of the timeout. Defaults to nil.
	Answered func(ctx context.Context, since time.Time) bool
}

// answeredWait bounds the wait of a timed-out publish for a PONG: a server
// that answers at all answers a PING within milliseconds, and the caller's
// ack deadline follows the publish timeout closely.
const answeredWait = 250 * time.Millisecond

// Publisher publishes Watermill messages to JetStream and waits for their
// PubAcks. It is safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config

	// sends carries publishes to the one goroutine that hands them to the
	// client; see writer.
	sends chan *send
	// writerDone is closed when the writer goroutine returned (after
	// Close, once the sends queued are written).
	writerDone chan struct{}

	// mu is held shared by every publish in progress and exclusively by
	// Close, which sets closed and closes sends.
	mu     sync.RWMutex
	closed bool

	// connClosed is closed when Config.Conn is closed for good; never
	// without a Conn.
	connClosed chan struct{}

	// longest is the length of the longest subject handed to the client,
	// on the publisher's one connection (noteSubject).
	longest atomic.Int64
}

// send is one message on its way to the client, and the client's answer.
type send struct {
	subject string
	msg     *message.Message
	future  jetstream.PubAckFuture
	err     error
	done    chan struct{} // receives once the writer called the client
}

var sendPool = sync.Pool{New: func() any { return &send{done: make(chan struct{}, 1)} }}

// timerPool holds stopped timers for PublishMsg's PubAck wait: a new timer
// per message (its channel) was 3 % of the relay's CPU in a profile of
// bridge-bench.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

var _ message.Publisher = (*Publisher)(nil)

// New returns a Publisher over js. js should be created with
// jetstream.WithPublishAsyncTimeout (so that no PubAck future waits
// forever, nats.go#1819) and a WithPublishAsyncMaxPending above the number
// of concurrent publishes. The config is copied; zero fields take defaults.
func New(js jetstream.JetStream, cfg Config) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: js: must not be nil", config.ErrInvalid)
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = PublishTimeoutDefault
	}
	if cfg.PublishTimeout < 0 {
		return nil, fmt.Errorf("%w: PublishTimeout: %s: must be positive", config.ErrInvalid, cfg.PublishTimeout)
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = MetadataMarshaler{}
	}
	p := &Publisher{js: js, cfg: cfg, sends: make(chan *send, 64), writerDone: make(chan struct{}), connClosed: make(chan struct{})}
	if nc := cfg.Conn; nc != nil {
		closed := nc.StatusChanged(nats.CLOSED)
		go func() {
			// Ends when the connection closes: by the server, or by its
			// owner after the relay stopped.
			if !nc.IsClosed() {
				<-closed
			}
			nc.RemoveStatusListener(closed)
			close(p.connClosed)
		}()
	}
	go p.writer()
	return p, nil
}

// writer marshals each message and hands it to the client's
// PublishMsgAsync, which encodes its headers and writes it to the
// connection's buffer, and passes back the PubAck future. It runs until
// Close.
//
// It exists for speed: marshaling and the client's publish path are deep,
// and run on the caller's goroutine — a new one per message under the
// Watermill router — they made the Go runtime grow and copy a fresh stack
// for nearly every message (a sixth of the relay's CPU in a profile of
// bridge-bench). This goroutine's stack grows once. Waiting for PubAcks
// stays with the callers, so many still await theirs at once.
func (p *Publisher) writer() {
	defer close(p.writerDone)
	for s := range p.sends {
		p.write(s)
		s.done <- struct{}{}
	}
}

// write marshals and publishes one message. A panic in the marshaler or
// the client becomes the error of that message, as the router's panic
// recovery would have made it on the caller's goroutine.
func (p *Publisher) write(s *send) {
	defer func() {
		if r := recover(); r != nil {
			s.future, s.err = nil, fmt.Errorf("publish to %s: panic: %v", s.subject, r)
		}
	}()
	m, err := p.cfg.Marshaler.Marshal(s.subject, s.msg)
	if err != nil {
		s.err = fmt.Errorf("marshal message %s: %w", s.msg.UUID, err)
		return
	}
	p.noteSubject(s.subject)
	if s.future, err = p.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0)); err != nil {
		if p.cfg.Conn != nil && p.cfg.Conn.IsClosed() {
			// nats.go says "error creating async reply handler: nats:
			// connection closed" without wrapping nats.ErrConnectionClosed.
			s.err = fmt.Errorf("publish to %s: %w (%v)", s.subject, ErrNotSent, err)
			return
		}
		s.err = fmt.Errorf("publish to %s: %w", s.subject, err)
	}
}

// noteSubject records the length of subject, handed to the client, when
// it is the longest yet.
func (p *Publisher) noteSubject(subject string) {
	for n := int64(len(subject)); ; {
		longest := p.longest.Load()
		if n <= longest || p.longest.CompareAndSwap(longest, n) {
			return
		}
	}
}

// publishAsync marshals and publishes msg through the writer and returns
// its future.
func (p *Publisher) publishAsync(subject string, msg *message.Message) (jetstream.PubAckFuture, error) {
	s := sendPool.Get().(*send)
	s.subject, s.msg = subject, msg
	p.sends <- s
	<-s.done
	future, err := s.future, s.err
	*s = send{done: s.done}
	sendPool.Put(s)
	return future, err
}

// Publish publishes msgs to subject topic, all at once, and returns when
// every PubAck arrived; the first error otherwise. It implements
// message.Publisher. Use PublishMsg to learn the stream and sequence.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		wg.Go(func() {
			_, errs[i] = p.PublishMsg(msg.Context(), topic, msg)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PublishMsg publishes one message to subject and waits for its PubAck, at
// most PublishTimeout unless ctx ends first. It returns the PubAck;
// PubAck.Duplicate reports that the stream already held this Nats-Msg-Id.
//
// It never retries by itself (jetstream.WithRetryAttempts(0)): a retry
// inside the client could land after later messages and break per-key
// order. Errors are the client's: jetstream.ErrNoStreamResponse (no stream
// covers the subject), jetstream.ErrAsyncPublishTimeout, nats.ErrTimeout,
// nats.ErrConnectionClosed, *jetstream.APIError from the server, ctx's
// error, or ErrClosed. A timeout or a disconnect leaves the outcome
// unknown: the message may have been stored.
//
// When ctx carries a Turn (WithTurn), the message is handed to the client
// only after the previous turn's message was, and its own turn passes as
// soon as it was handed over (or the publish gave up before). When an
// earlier message of the chain was not handed over, it returns
// ErrTurnBroken without sending.
func (p *Publisher) PublishMsg(ctx context.Context, subject string, msg *message.Message) (*jetstream.PubAck, error) {
	turn := turnFrom(ctx)
	if turn != nil {
		defer turn.Pass(false) // returned before the hand-over: later turns are refused
		if !turn.wait(ctx) {
			return nil, ErrTurnBroken
		}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, ErrClosed
	}

	began := time.Now()
	future, err := p.publishAsync(subject, msg)
	if turn != nil {
		turn.Pass(err == nil) // handed to the client (or not): the next one may follow (or is refused)
	}
	if err != nil {
		return nil, err
	}
	timer := timerPool.Get().(*time.Timer)
	timer.Reset(p.cfg.PublishTimeout)
	defer func() {
		timer.Stop() // since Go 1.23 no stale tick survives Stop, so the timer can be reused
		timerPool.Put(timer)
	}()
	select {
	case ack := <-future.Ok():
		return ack, nil
	case err := <-future.Err():
		return nil, p.failed(subject, began, err)
	case <-timer.C:
		return nil, p.timedOut(subject, began, fmt.Errorf("no PubAck within %s: %w", p.cfg.PublishTimeout, jetstream.ErrAsyncPublishTimeout))
	case <-ctx.Done():
		return nil, fmt.Errorf("publish to %s: %w", subject, ctx.Err())
	case <-p.connClosed:
		return nil, p.closedErr(subject)
	}
}

// timedOut is the error of a publish begun at began that got no PubAck in
// time: the server's permission violation for subject, the server not
// answering at all, or err.
func (p *Publisher) timedOut(subject string, began time.Time, err error) error {
	if denied := p.denied(subject, began); denied != nil {
		return fmt.Errorf("publish to %s: %w", subject, denied)
	}
	if p.cfg.Answered != nil {
		ctx, cancel := context.WithTimeout(context.Background(), answeredWait)
		answered := p.cfg.Answered(ctx, began)
		cancel()
		if !answered {
			return fmt.Errorf("publish to %s: %w (%v)", subject, ErrUnresponsive, err)
		}
	}
	return fmt.Errorf("publish to %s: %w", subject, err)
}

// lineTooLong reports whether err, a connection's last error, is the NATS
// server's -ERR 'Maximum Control Line Exceeded' (nats-server
// server/parser.go overMaxControlLineLimit), which nats.go keeps as the
// text "nats: maximum control line exceeded" without a sentinel (nats.go
// nats.go processErr). The one place that reads that text; shown by
// cmd/bridge TestConnectionClosedForGoodHeals against a real server.
func lineTooLong(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "maximum control line exceeded")
}

func (p *Publisher) denied(subject string, since time.Time) error {
	if p.cfg.Denied == nil {
		return nil
	}
	return p.cfg.Denied(subject, since)
}

// Close makes later publishes fail with ErrClosed and waits for those in
// progress, then stops the goroutine that hands messages to the client. It
// does not close the NATS connection. Idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.sends)
	}
	return nil
}

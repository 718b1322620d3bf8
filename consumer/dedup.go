package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Handler processes one message. It must not ack, nak or term msg: the
// wrapper settles the message from the returned error (nil: ack; non-nil:
// release the dedup entry and nak). It may call msg.InProgress to extend the
// consumer's AckWait. A panic is recovered and handled as an error.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Deduplicator runs handlers at most once per Nats-Msg-Id among successful
// runs, as long as the dedup entry lives (see the package doc for the exact
// guarantee). It holds no per-message state and is safe for concurrent use;
// share one per bucket and handler set.
type Deduplicator struct {
	kv  jetstream.KeyValue
	cfg config
}

// New returns a Deduplicator keeping its entries in kv (see CreateBucket).
// It fails with an error wrapping ErrInvalidConfig when an option value is
// invalid or kv is nil.
func New(kv jetstream.KeyValue, opts ...Option) (*Deduplicator, error) {
	if kv == nil {
		return nil, fmt.Errorf("%w: key-value bucket: nil: want a jetstream.KeyValue", ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Deduplicator{kv: kv, cfg: cfg}, nil
}

// Dedup wraps handler for cons.Consume, or for calling on each message from
// cons.Messages() or cons.Fetch: see Deduplicator.Wrap. It panics with an
// error wrapping ErrInvalidConfig when New would fail, like
// regexp.MustCompile; use New to get the error instead.
func Dedup(kv jetstream.KeyValue, handler Handler, opts ...Option) jetstream.MessageHandler {
	d, err := New(kv, opts...)
	if err != nil {
		panic(fmt.Errorf("consumer.Dedup: %w", err))
	}
	return d.Wrap(handler)
}

// Wrap returns a jetstream.MessageHandler that, per message:
//
//   - without a Nats-Msg-Id header: runs handler with no dedup (or, with
//     RequireMsgID, terminates the message);
//   - claims the message with kv.Create(Key(id)); if the key exists, double
//     acks the message without running handler (with WithProcessingLease: see
//     there); if the KV call fails otherwise, naks without running handler;
//   - runs handler; on success double acks (after marking the entry "done"
//     with a lease); on failure deletes the entry, fenced by the claim's
//     revision, and naks so that the redelivery is processed again.
//
// It panics if handler is nil.
func (d *Deduplicator) Wrap(handler Handler) jetstream.MessageHandler {
	if handler == nil {
		panic("consumer: Wrap: nil handler")
	}
	return func(msg jetstream.Msg) { d.handle(msg, handler) }
}

// handle processes and settles one message.
func (d *Deduplicator) handle(msg jetstream.Msg, handler Handler) {
	log := d.cfg.logger.With(slog.String("subject", msg.Subject()))
	md, err := msg.Metadata()
	if err == nil {
		log = log.With(slog.String("stream", md.Stream), slog.Uint64("stream_seq", md.Sequence.Stream),
			slog.Uint64("num_delivered", md.NumDelivered))
	} else {
		md = nil
	}

	id := msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		if d.cfg.requireMsgID {
			log.Warn("message without Nats-Msg-Id terminated")
			if err := msg.TermWithReason("no " + jetstream.MsgIDHeader + " header"); err != nil {
				log.Warn("terminate message", slog.Any("error", err))
			}
			return
		}
		if err := d.run(d.cfg.base, handler, msg, log); err != nil {
			d.nak(msg, log)
			return
		}
		d.ack(msg, log)
		return
	}

	key := Key(id)
	log = log.With(slog.String("msg_id", id), slog.String("key", key))
	start := time.Now()
	rev, ok := d.claim(msg, id, key, md, log)
	if !ok {
		return // claim settled the message
	}

	ctx, cancel := d.cfg.base, context.CancelFunc(func() {})
	if d.cfg.lease > 0 {
		// Past the lease another delivery may take the entry over.
		ctx, cancel = context.WithDeadline(ctx, start.Add(d.cfg.lease))
	}
	err = d.run(ctx, handler, msg, log)
	cancel()
	if err != nil {
		d.release(key, rev, log)
		d.nak(msg, log)
		return
	}
	if d.cfg.lease > 0 {
		d.markDone(id, key, rev, md, log)
	}
	d.ack(msg, log)
}

// claim creates the message's dedup entry, or with a lease takes over an
// abandoned one, and returns its revision. When it returns false it has
// settled the message (acked a duplicate, or nakked).
func (d *Deduplicator) claim(msg jetstream.Msg, id, key string, md *jetstream.MsgMetadata, log *slog.Logger) (uint64, bool) {
	if d.cfg.base.Err() != nil {
		log.Debug("base context ended; message nakked unprocessed")
		d.nak(msg, log)
		return 0, false
	}
	ctx, cancel := context.WithTimeout(d.cfg.base, d.cfg.timeout)
	defer cancel()
	value := newEntry(stateProcessing, id, md).encode()
	rev, err := d.kv.Create(ctx, key, value)
	switch {
	case err == nil:
		return rev, true
	case !errors.Is(err, jetstream.ErrKeyExists):
		log.Warn("create dedup entry; message nakked", slog.Any("error", err))
		d.nak(msg, log)
		return 0, false
	case d.cfg.lease == 0:
		log.Debug("duplicate message skipped")
		d.ack(msg, log)
		return 0, false
	}

	cur, err := d.kv.Get(ctx, key)
	if err != nil {
		// ErrKeyNotFound: released or expired since the Create; the
		// redelivery claims it again.
		log.Warn("read dedup entry; message nakked", slog.Any("error", err))
		d.nak(msg, log)
		return 0, false
	}
	e, err := decodeEntry(cur.Value())
	if err != nil || e.State != stateProcessing {
		log.Debug("duplicate message skipped", slog.String("state", e.State))
		d.ack(msg, log)
		return 0, false
	}
	// Created is the server's time of the entry's last write
	// (nats.go jetstream kv.go: the stored message's timestamp).
	age := max(time.Since(cur.Created()), 0)
	if age < d.cfg.lease {
		log.Debug("message held by another delivery; nakked until its lease ends",
			slog.Duration("lease_left", d.cfg.lease-age))
		if err := msg.NakWithDelay(d.cfg.lease - age); err != nil {
			log.Warn("nak message", slog.Any("error", err))
		}
		return 0, false
	}
	rev, err = d.kv.Update(ctx, key, value, cur.Revision())
	if err != nil {
		// ErrKeyRevisionMismatch: another delivery took it over first.
		log.Warn("take over dedup entry; message nakked", slog.Any("error", err))
		d.nak(msg, log)
		return 0, false
	}
	log.Info("took over abandoned dedup entry", slog.Duration("age", age))
	return rev, true
}

// run calls handler, turning a panic into an error.
func (d *Deduplicator) run(ctx context.Context, handler Handler, msg jetstream.Msg, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			log.Error("handler panicked; message nakked", slog.Any("panic", r),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	if err := handler(ctx, msg); err != nil {
		log.Warn("handler failed; message nakked", slog.Any("error", err))
		return err
	}
	return nil
}

// settleContext bounds a KV call or ack made after the handler returned. It
// ignores the base context's cancellation so that a shutdown does not drop
// the outcome of work already done.
func (d *Deduplicator) settleContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(d.cfg.base), d.cfg.timeout)
}

// release deletes the entry of a failed message so that its redelivery runs
// the handler again. The delete is fenced by the claim's revision: an entry
// taken over by another delivery is left alone.
func (d *Deduplicator) release(key string, rev uint64, log *slog.Logger) {
	ctx, cancel := d.settleContext()
	defer cancel()
	err := d.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		log.Warn("dedup entry taken over by another delivery; left in place")
	default:
		// The entry stays: without a lease the redelivery is skipped as a
		// duplicate although the handler failed; with one it is retried once
		// the lease has passed.
		log.Error("delete dedup entry of failed message; its redelivery may be skipped", slog.Any("error", err))
	}
}

// markDone sets the entry of a processed message to "done" (lease mode).
func (d *Deduplicator) markDone(id, key string, rev uint64, md *jetstream.MsgMetadata, log *slog.Logger) {
	ctx, cancel := d.settleContext()
	defer cancel()
	_, err := d.kv.Update(ctx, key, newEntry(stateDone, id, md).encode(), rev)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		log.Warn("dedup entry taken over by another delivery while the handler ran; the message may have been processed twice")
	default:
		// Acked anyway: the handler's work is done. The entry stays
		// "processing" and a republished copy would be taken over after the
		// lease.
		log.Error("mark dedup entry done", slog.Any("error", err))
	}
}

func (d *Deduplicator) ack(msg jetstream.Msg, log *slog.Logger) {
	ctx, cancel := d.settleContext()
	defer cancel()
	err := msg.DoubleAck(ctx)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrMsgAlreadyAckd):
		log.Warn("message was already settled by its handler")
	default:
		// The server redelivers after AckWait; the entry makes the
		// redelivery a skipped duplicate.
		log.Warn("ack message", slog.Any("error", err))
	}
}

func (d *Deduplicator) nak(msg jetstream.Msg, log *slog.Logger) {
	var err error
	if d.cfg.nakDelay > 0 {
		err = msg.NakWithDelay(d.cfg.nakDelay)
	} else {
		err = msg.Nak()
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		log.Warn("nak message", slog.Any("error", err))
	}
}

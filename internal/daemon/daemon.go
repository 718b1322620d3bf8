// Package daemon is the lifecycle shared by the relays of `bridge run`:
// services such as the duplicate-window guard run beside the relay, the
// relay stops when its NATS connection is closed for good, and a Watermill
// router is started and drained the same way whatever the source.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

// ErrConnectionClosed is returned (wrapped) by Run when the NATS
// connection was closed for good: nats.go does not reconnect after some
// server errors (a protocol line over max_control_line, an authorization
// error received twice in a row), and a closed connection publishes
// nothing. The caller builds the relay again, with a new connection.
var ErrConnectionClosed = errors.New("NATS connection closed for good")

// Run runs relay, and each of services beside it, until ctx ends or nc is
// closed for good: then relay's context ends, it drains, and Run returns
// an error wrapping ErrConnectionClosed (unless ctx ended too: a stop
// asked for is a stop). Services are stopped with the relay; they log
// their own failures. Run returns relay's error, nil after a clean stop.
func Run(ctx context.Context, nc *nats.Conn, logger *slog.Logger, relay func(context.Context) error, services ...func(context.Context)) error {
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()

	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	lost := make(chan error, 1)
	go func() {
		if !nc.IsClosed() {
			select {
			case <-closed:
			case <-relayCtx.Done():
				return
			}
		}
		err := fmt.Errorf("%w: %v", ErrConnectionClosed, nc.LastError())
		logger.Error("NATS connection closed for good: stopping the relay to start again with a new connection", slog.Any("error", err))
		lost <- err
		stopRelay()
	}()

	var wg sync.WaitGroup
	for _, service := range services {
		wg.Go(func() { service(relayCtx) })
	}
	err := relay(relayCtx)
	stopRelay()
	wg.Wait()
	select {
	case lostErr := <-lost:
		if ctx.Err() == nil {
			return errors.Join(lostErr, err)
		}
		// Stopping anyway: the relay drained, a closed connection
		// changes nothing.
	default:
	}
	if err == nil {
		logger.Info("relay stopped")
	}
	return err
}

// RunRouter runs router until ctx ends, then closes it (the router waits
// for running handlers up to its CloseTimeout), calls closed, and closes
// pub. The router gets a context that shutdown does not cancel: a cancelled
// context would abort publishes that should finish. It returns nil after a
// clean stop and an error when the router stops by itself.
func RunRouter(ctx context.Context, router *message.Router, pub interface{ Close() error }, closed func(), logger *slog.Logger, stopping string) error {
	errc := make(chan error, 1)
	go func() { errc <- router.Run(context.WithoutCancel(ctx)) }()
	// Closing a router that has not subscribed yet leaves its handlers
	// running until the close timeout: wait for it to run first.
	select {
	case <-router.Running():
	case err := <-errc:
		return fmt.Errorf("relay: start router: %w", err)
	}
	select {
	case <-ctx.Done():
		logger.Info(stopping)
		closeErr := router.Close()
		if closed != nil {
			closed()
		}
		if err := errors.Join(<-errc, closeErr); err != nil {
			return fmt.Errorf("stop relay: %w", err)
		}
		return pub.Close()
	case err := <-errc:
		if err == nil {
			err = errors.New("router stopped unexpectedly")
		}
		return fmt.Errorf("relay: %w", err)
	}
}

// Package daemon is the lifecycle shared by the relays of `bridge run`:
// the health server and the duplicate-window guard run beside the relay,
// and a Watermill router is started and drained the same way whatever the
// source.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-bridge/bridge/internal/dedup"
	"github.com/outbox-bridge/bridge/internal/health"
)

// Run serves hs and runs guard beside relay until ctx ends: /readyz turns
// 503 as soon as ctx ends, relay drains, then the HTTP server stops. In
// refuse mode the guard stops relay when it finds an unsafe stream, and its
// *dedup.UnsafeStreamError is returned. Run returns nil after a clean stop.
func Run(ctx context.Context, hs *health.Server, guard *dedup.Guard, logger *slog.Logger, relay func(context.Context) error) error {
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	httpErr := make(chan error, 1)
	go func() { httpErr <- hs.Serve(httpCtx) }()
	go func() {
		<-ctx.Done()
		hs.SetDraining()
	}()

	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	guardErr := make(chan error, 1)
	go func() {
		err := guard.Run(relayCtx, dedup.GuardIntervalDefault)
		if err != nil {
			logger.Error("dedup guard: stopping the relay", slog.Any("error", err))
			stopRelay()
		}
		guardErr <- err
	}()

	err := relay(relayCtx)
	stopRelay()
	err = errors.Join(<-guardErr, err)
	stopHTTP()
	if herr := <-httpErr; herr != nil && !errors.Is(herr, context.Canceled) {
		err = errors.Join(err, herr)
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
